// The dashboard's own glue: one EventSource per page; host cards and sparklines from hw_metrics
// snapshots, server-rendered panels swapped in, a run's graph re-read when its outbox moves.
(function () {
  "use strict";
  if (window.htmx) {
    // Show the server's message for a refused action (4xx) instead of swallowing it.
    htmx.config.responseHandling = [{ code: "204", swap: false }, { code: "[234]..", swap: true, error: false }, { code: "...", swap: false, error: true }];
  }
  var hostsEl = document.getElementById("hosts");
  var runEl = document.getElementById("run-live");
  var runsEl = document.getElementById("runs-live");
  if (!hostsEl && !runEl && !runsEl) return;

  var HISTORY = 240;
  var hosts = {};
  var GiB = 1073741824;

  function gib(b) { return b == null ? "?" : (b / GiB).toFixed(1) + " GiB"; }
  function pct(used, total) { return used != null && total ? (100 * used / total) : null; }
  function fmt(v, digits) { return v == null ? "?" : v.toFixed(digits == null ? 0 : digits); }
  function set(card, field, text) { var el = card.querySelector('[data-f="' + field + '"]'); if (el) el.textContent = text; }

  function card(label) {
    var h = hosts[label];
    if (h) return h;
    var el = document.getElementById("host-card").content.firstElementChild.cloneNode(true);
    el.id = "host-" + label;
    el.dataset.host = label;
    var placeholder = document.getElementById("no-hosts");
    if (placeholder) placeholder.remove();
    var after = Array.prototype.find.call(hostsEl.children, function (c) { return c.dataset.host > label; });
    hostsEl.insertBefore(el, after || null);
    h = hosts[label] = { el: el, data: [[], [], [], []], plot: null };
    return h;
  }

  function gpuLine(g) {
    return "GPU" + g.index + (g.name ? " " + g.name : "") + ": " + fmt(g.util_percent) + "% · " +
      gib(g.memory_used_bytes) + " / " + gib(g.memory_total_bytes) + " · " + fmt(g.temperature_c) + "°C";
  }

  function updateHost(s) {
    if (!hostsEl || !s || !s.host) return;
    var h = card(s.host), el = h.el;
    var ram = pct(s.memory && s.memory.used_bytes, s.memory && s.memory.total_bytes);
    set(el, "host", s.host);
    set(el, "cpu", fmt(s.cpu && s.cpu.percent, 1) + "% of " + (s.cpu && s.cpu.count) + " cores");
    set(el, "load", s.cpu && s.cpu.load ? "load " + s.cpu.load.map(function (x) { return x.toFixed(2); }).join(" ") : "");
    set(el, "ram", gib(s.memory && s.memory.used_bytes) + " / " + gib(s.memory && s.memory.total_bytes) + " (" + fmt(ram) + "%)");
    set(el, "swap", gib(s.swap && s.swap.used_bytes) + " / " + gib(s.swap && s.swap.total_bytes));
    var st = s.stack;
    set(el, "stack", st ? "stack " + fmt(st.cpu_percent, 1) + "% CPU, " + gib(st.memory_bytes) + " · rest " +
      fmt(st.other_cpu_percent, 1) + "% CPU, " + gib(st.other_memory_bytes) : "no container attribution");
    var gpus = el.querySelector('[data-f="gpus"]');
    gpus.replaceChildren.apply(gpus, (s.gpus || []).map(function (g) {
      var p = document.createElement("div"); p.className = "gpu"; p.textContent = gpuLine(g); return p;
    }));
    if (s.truncated) gpus.title = "the notification was trimmed: " + JSON.stringify(s.truncated);
    el.dataset.ts = s.ts;
    el.dataset.cpu = s.cpu && s.cpu.percent;
    el.classList.remove("flash-in"); void el.offsetWidth; el.classList.add("flash-in");
    var utils = (s.gpus || []).map(function (g) { return g.util_percent; }).filter(function (u) { return u != null; });
    var d = h.data;
    if (d[0].length && s.ts <= d[0][d[0].length - 1]) return;
    d[0].push(s.ts); d[1].push(s.cpu ? s.cpu.percent : null); d[2].push(ram);
    d[3].push(utils.length ? utils.reduce(function (a, b) { return a + b; }, 0) / utils.length : null);
    if (d[0].length > HISTORY) d.forEach(function (col) { col.shift(); });
    if (!window.uPlot) return;
    if (!h.plot) {
      h.plot = new uPlot({
        width: 280, height: 56, cursor: { show: false }, legend: { show: false }, select: { show: false },
        axes: [{ show: false }, { show: false }], scales: { x: { time: true }, y: { range: [0, 100] } },
        series: [{}, { stroke: "#1b7f4c", width: 1.5, points: { show: false } }, { stroke: "#2b5fb3", width: 1.5, points: { show: false } },
          { stroke: "#c2410c", width: 1.5, points: { show: false } }],
      }, d, el.querySelector('[data-f="spark"]'));
    } else {
      h.plot.setData(d);
    }
  }

  function ages() {
    var now = Date.now() / 1000;
    Object.keys(hosts).forEach(function (k) {
      var ts = parseFloat(hosts[k].el.dataset.ts), age = now - ts;
      set(hosts[k].el, "age", isNaN(age) ? "" : (age < 90 ? Math.max(0, age).toFixed(0) + "s ago" : (age / 60).toFixed(0) + "m ago"));
      hosts[k].el.classList.toggle("stale", age > 30);
    });
  }

  // Each queue's completions per minute (the last 15), drawn after every panel swap.
  function queueSparks(root) {
    if (!window.uPlot) return;
    root.querySelectorAll("[data-per-minute]").forEach(function (cell) {
      var counts = JSON.parse(cell.dataset.perMinute || "[]");
      if (!counts.length) return;
      var xs = counts.map(function (_, i) { return i - counts.length + 1; });
      var top = Math.max(1, Math.max.apply(null, counts));
      cell.replaceChildren();
      new uPlot({
        width: 120, height: 22, cursor: { show: false }, legend: { show: false }, select: { show: false },
        axes: [{ show: false }, { show: false }], scales: { x: { time: false, range: [-counts.length + 0.5, 0.5] }, y: { range: [0, top] } },
        series: [{}, { stroke: "#1b7f4c", fill: "rgba(27,127,76,0.35)", width: 1, points: { show: false },
          paths: uPlot.paths && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.8, 8] }) : undefined }],
      }, [xs, counts], cell);
    });
  }

  if (hostsEl) {
    JSON.parse(hostsEl.dataset.initial || "[]").forEach(updateHost);
    setInterval(ages, 1000);
    queueSparks(document);
  }

  var live = document.getElementById("live");
  var es = new EventSource("/events");
  es.onopen = function () { live.className = "live on"; document.body.dataset.live = "1"; };
  es.onerror = function () { live.className = "live off"; document.body.dataset.live = "0"; };
  es.addEventListener("host", function (e) { updateHost(JSON.parse(e.data)); ages(); });
  ["workers", "queues"].forEach(function (name) {
    es.addEventListener(name, function (e) {
      var el = document.getElementById("panel-" + name);
      if (!el) return;
      el.innerHTML = e.data;
      if (window.htmx) htmx.process(el);
      queueSparks(el);
    });
  });

  // Re-read a server-rendered fragment at most every 0.5 s, however fast the events come.
  function refresher(el, url) {
    var busy = false, again = false;
    return function reload() {
      if (busy) { again = true; return; }
      busy = true;
      fetch(url()).then(function (r) { return r.ok ? r.text() : null; }).then(function (html) {
        if (html != null) el.innerHTML = html;
      }).finally(function () {
        setTimeout(function () { busy = false; if (again) { again = false; reload(); } }, 500);
      });
    };
  }

  if (runEl) {
    var reloadRun = refresher(runEl, function () { return "/runs/" + runEl.dataset.run + "/live"; });
    es.addEventListener("run", function (e) { if (e.data.trim() === runEl.dataset.run) reloadRun(); });
  }
  if (runsEl) {
    // A run moves (its outbox) or starts (its roots are queued: the queues panel is re-read).
    var reloadRuns = refresher(runsEl, function () { return "/runs/live?status=" + encodeURIComponent(runsEl.dataset.status); });
    es.addEventListener("run", reloadRuns);
    es.addEventListener("queues", reloadRuns);
  }
})();
