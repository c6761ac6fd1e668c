// The Costs page's charts: one bar chart per figure, a bar per group, drawn from /costs.json (the table's own data).
(function () {
  "use strict";
  var root = document.getElementById("cost-charts");
  if (!root || !window.uPlot) return;
  var CHARTS = [
    ["cpu_seconds", "CPU-seconds", 1],
    ["gpu_seconds", "GPU-seconds (wall × GPUs held)", 1],
    ["peak_vram_p95_bytes", "peak VRAM p95 (GB)", 1e9],
    ["peak_vram_max_bytes", "peak VRAM max (GB)", 1e9],
    ["model_load_seconds", "model-load seconds", 1],
    ["model_hit_rate", "model hit rate (%)", 0.01, 100],
  ];

  function draw(report) {
    var names = report.groups.map(function (g) { return g.group == null ? "—" : String(g.group); });
    var xs = names.map(function (_, i) { return i; });
    root.replaceChildren();
    CHARTS.forEach(function (c) {
      var ys = report.groups.map(function (g) { return g[c[0]] == null ? null : g[c[0]] / c[2]; });
      var card = document.createElement("article");
      card.className = "card cost-chart";
      card.dataset.metric = c[0];
      var title = document.createElement("h3");
      title.textContent = c[1];
      card.appendChild(title);
      root.appendChild(card);
      var top = Math.max.apply(null, ys.filter(function (y) { return y != null; }).concat([0]));
      new uPlot({
        width: 360, height: 180, legend: { show: false }, select: { show: false }, cursor: { show: false },
        scales: { x: { time: false, range: [-0.5, names.length - 0.5] }, y: { range: [0, c[3] || (top > 0 ? top * 1.1 : 1)] } },
        axes: [{ values: function (u, splits) { return splits.map(function (i) { return Number.isInteger(i) ? names[i] || "" : ""; }); },
                 splits: function () { return xs; } }, { size: 60 }],
        series: [{}, { stroke: "#1b5f9f", fill: "rgba(27,95,159,0.4)", width: 1, points: { show: false },
          paths: uPlot.paths && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.7, 60] }) : undefined }],
      }, [xs, ys], card);
    });
    root.dataset.drawn = String(report.groups.length);
  }

  fetch(root.dataset.src, { headers: { Accept: "application/json" } })
    .then(function (r) { return r.ok ? r.json() : Promise.reject(new Error("HTTP " + r.status)); })
    .then(draw)
    .catch(function (e) { root.textContent = "charts unavailable: " + e.message; });
})();
