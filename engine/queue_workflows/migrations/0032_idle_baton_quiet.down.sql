DROP FUNCTION IF EXISTS qw_take_idle_baton(integer, text, integer);
