#!/bin/sh
# The images' one non-root user, uid/gid 10001, owning nothing but its home; and, on a GPU
# base that received the Python interpreter by COPY, the linker cache that finds libpython.
set -eu
ldconfig
groupadd --system --gid 10001 qw
useradd --system --uid 10001 --gid qw --home-dir /home/qw --create-home --shell /usr/sbin/nologin qw
