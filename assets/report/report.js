// leakscope report: draws the charts from the embedded data (id "ls-data") with uPlot.
// The tables are already in the page; this file only adds the charts and says, in the
// footer's data attributes, whether everything rendered (the browser test reads them).
(function () {
  "use strict";
  var errors = window.__lsErrors || [];
  var status = document.getElementById("ls-status");
  var drawn = 0;

  var fmtBytes = window.lsFormat.bytes, fmtCount = window.lsFormat.count;

  var PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                 "#edc948", "#b07aa1", "#ff9da7", "#9c755f"];
  var OTHER = "#bab0ac";

  function width(el) {
    return Math.max(320, (el.clientWidth || document.body.clientWidth || 900) - 4);
  }

  // Vertical lines at event indices, drawn under the series.
  function markers(lines) {
    return {
      hooks: {
        drawClear: [function (u) {
          var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
          var min = u.scales.x.min, max = u.scales.x.max;
          ctx.save();
          lines.forEach(function (m) {
            ctx.strokeStyle = m.color;
            ctx.lineWidth = m.width * (window.devicePixelRatio || 1);
            ctx.setLineDash(m.dash || []);
            ctx.beginPath();
            m.at.forEach(function (x) {
              if (x < min || x > max) return;
              var px = Math.round(u.valToPos(x, "x", true));
              ctx.moveTo(px, top);
              ctx.lineTo(px, top + h);
            });
            ctx.stroke();
          });
          ctx.restore();
        }]
      }
    };
  }

  // Zooming one chart zooms the other charts of the same device (over the same events).
  var linked = [];
  var groups = {};
  var syncing = false;
  function link(u, group) {
    linked.push(u);
    (groups[group] = groups[group] || []).push(u);
    u.lsGroup = group;
  }
  function onScale(u, key) {
    if (key !== "x" || syncing) return;
    syncing = true;
    try {
      (groups[u.lsGroup] || []).forEach(function (o) {
        if (o !== u) o.setScale("x", { min: u.scales.x.min, max: u.scales.x.max });
      });
      if (window.lsAllocations) window.lsAllocations.setRange(u.lsGroup, u.scales.x.min, u.scales.x.max);
    } finally {
      syncing = false;
    }
  }
  // The allocation timeline zoomed: the device's charts follow (over the same events).
  function setGroupRange(group, min, max) {
    if (syncing) return;
    syncing = true;
    try {
      (groups[group] || []).forEach(function (o) { o.setScale("x", { min: min, max: max }); });
    } finally {
      syncing = false;
    }
  }

  // Byte axes start at zero: an area that starts mid-way exaggerates every change.
  function fromZero(u, min, max) {
    return [0, max > 0 ? max * 1.05 : 1];
  }

  // Byte ticks at binary steps (256 MiB, 512 MiB, 1 GiB), labelled in binary units.
  var BINARY = [];
  for (var p2 = 1; p2 <= Math.pow(2, 52); p2 *= 2) BINARY.push(p2);
  function bytesAxis() {
    return {
      size: 80,
      incrs: BINARY,
      values: function (u, splits) { return splits.map(fmtBytes); }
    };
  }
  // Line styles that keep two equal series apart (one would hide the other).
  var DASHES = [[], [8, 4], [2, 3], [10, 3, 2, 3], [4, 4], [1, 2]];
  // Events and windows are whole numbers: zoomed in, uPlot would also split at halves,
  // which rounded would label two ticks alike.
  var WHOLE = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5,
               5e5, 1e6, 2e6, 5e6, 1e7, 2e7, 5e7, 1e8, 2e8, 5e8, 1e9];
  function eventAxis(label) {
    return {
      label: label,
      incrs: WHOLE,
      values: function (u, splits) { return splits.map(fmtCount); }
    };
  }

  function chart(id, fn) {
    var el = document.getElementById(id);
    if (!el) return;
    try {
      fn(el);
      drawn++;
    } catch (e) {
      errors.push(id + ": " + (e && e.message ? e.message : String(e)));
    }
  }

  // One device's charts: its timeline, its sites over time, its suspects' growth.
  function drawDevice(dev) {
    var n = dev.device;
    chart("timeline-" + n, function (el) {
      var t = dev.timeline;
      if (!t.events.length) {
        el.textContent = "No trace events on this device: the file holds only its final " +
          "state (see what holds memory at the end, below).";
        document.getElementById("timeline-peak-" + n).textContent = "no trace";
        drawn--; // a message, not a chart
        return;
      }
      var peak = 0, peakAt = null;
      for (var i = 0; i < t.requested.length; i++) {
        if (t.requested[i] > peak) { peak = t.requested[i]; peakAt = t.events[i]; }
      }
      var readout = document.getElementById("timeline-peak-" + n);
      readout.dataset.bytes = String(peak);
      readout.dataset.event = peakAt == null ? "" : String(peakAt);
      readout.textContent = fmtBytes(peak) + " (" + fmtCount(peak) + " B)" +
        (peakAt == null ? "" : " after event " + fmtCount(peakAt));
      var lines = [{ at: dev.windows.starts, color: "rgba(90,100,110,0.45)", width: 1, dash: [3, 3] }];
      if (dev.peak.event_index != null) lines.push({ at: [dev.peak.event_index], color: "#b2182b", width: 2 });
      if (dev.ooms.length) lines.push({ at: dev.ooms.map(function (o) { return o.event_index; }), color: "#000", width: 2 });
      var u = new uPlot({
        width: width(el), height: 320,
        scales: { x: { time: false }, y: { range: fromZero } },
        cursor: { drag: { x: true, y: false } },
        plugins: [markers(lines)],
        hooks: { setScale: [onScale] },
        series: [
          { label: "event", value: function (u, v) { return v == null ? "" : fmtCount(v); } },
          { label: "requested", stroke: "#2166ac", width: 1.5, fill: "rgba(33,102,172,0.10)",
            value: function (u, v) { return fmtBytes(v); } },
          { label: "reserved", stroke: "#d6604d", width: 1.5,
            value: function (u, v) { return fmtBytes(v); } }
        ],
        axes: [eventAxis("event"), bytesAxis()]
      }, [t.events, t.requested, t.reserved], el);
      link(u, n);
    });

    // A stacked area of `s` (largest series at the bottom); `rest` names its remainder.
    function stacked(el, s, rest) {
      if (!s.events.length) { el.textContent = "No trace events."; drawn--; return; }
      var raw = s.sites.map(function (x) { return x.bytes; });
      var names = s.sites.map(function (x) { return x.site.label; });
      raw.push(s.other);
      names.push(rest);
      // Cumulative sums, bottom (largest site) first.
      var cum = [], acc = s.events.map(function () { return 0; });
      raw.forEach(function (r) {
        acc = acc.map(function (a, i) { return a + r[i]; });
        cum.push(acc);
      });
      // Drawn top layer first, so each lower layer paints over the one above it.
      var order = [];
      for (var k = cum.length - 1; k >= 0; k--) order.push(k);
      var series = [{ label: "event", value: function (u, v) { return v == null ? "" : fmtCount(v); } }];
      order.forEach(function (k) {
        var color = k === cum.length - 1 ? OTHER : PALETTE[k % PALETTE.length];
        series.push({
          label: names[k],
          stroke: color, width: 1, fill: color,
          value: function (u, v, si, i) { return i == null ? "" : fmtBytes(raw[k][i]); }
        });
      });
      var u = new uPlot({
        width: width(el), height: 300,
        scales: { x: { time: false }, y: { range: fromZero } },
        cursor: { drag: { x: true, y: false } },
        hooks: { setScale: [onScale] },
        series: series,
        axes: [eventAxis("event"), bytesAxis()]
      }, [s.events].concat(order.map(function (k) { return cum[k]; })), el);
      link(u, n);
    }

    chart("allocations-" + n, function (el) {
      if (!window.lsAllocations || !window.lsAllocations.draw(dev, function (min, max) {
        setGroupRange(n, min, max);
      })) drawn--; // a message, not a chart
    });
    chart("roles-" + n, function (el) { stacked(el, dev.roles, "other roles"); });
    chart("sites-" + n, function (el) { stacked(el, dev.sites, "everything else"); });

    chart("growth-" + n, function (el) {
      var g = dev.growth;
      if (!g.lines.length) return;
      var series = [{ label: g.windows_per_point > 1 ? "windows from" : "window",
                      value: function (u, v) { return v == null ? "" : fmtCount(v); } }];
      g.lines.forEach(function (line, i) {
        series.push({
          label: line.kind + ": " + line.site.label,
          stroke: PALETTE[i % PALETTE.length], width: 1.5 + (i % 2), dash: DASHES[i % DASHES.length],
          points: { show: g.windows.length <= 400 },
          value: function (u, v) { return fmtBytes(v); }
        });
      });
      new uPlot({
        width: width(el), height: 260,
        scales: { x: { time: false }, y: { range: fromZero } },
        cursor: { drag: { x: true, y: false } },
        series: series,
        axes: [eventAxis(g.windows_per_point > 1
                 ? "window (each point: the largest of " + g.windows_per_point + " windows)"
                 : "window"), bytesAxis()]
      }, [g.windows].concat(g.lines.map(function (l) { return l.bytes; })), el);
    });
  }

  var data;
  try {
    data = JSON.parse(document.getElementById("ls-data").textContent);
  } catch (e) {
    errors.push("report data: " + e.message);
  }

  if (data && typeof uPlot !== "undefined") {
    data.devices.forEach(drawDevice);

    var resizeTimer = null;
    window.addEventListener("resize", function () {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(function () {
        linked.forEach(function (u) {
          u.setSize({ width: width(u.root.parentNode), height: u.height });
        });
      }, 150);
    });
  } else if (data) {
    errors.push("uPlot did not load");
  }

  // The narrowest site cell of the tables, in pixels: a column squeezed to a sliver
  // (long paths in a wide table) would make the sites unreadable.
  var narrowest = null;
  Array.prototype.forEach.call(document.querySelectorAll("td.site"), function (td) {
    var w = td.getBoundingClientRect().width;
    if (w > 0 && (narrowest === null || w < narrowest)) narrowest = w;
  });
  status.dataset.siteWidth = narrowest === null ? "" : String(Math.round(narrowest));
  status.dataset.charts = String(drawn);
  status.dataset.errors = String(errors.length);
  // Milliseconds from navigation to everything drawn (the browser test bounds it).
  status.dataset.readyMs = String(Math.round(performance.now()));
  status.dataset.ready = "1";
  status.textContent = errors.length
    ? "Rendering problems: " + errors.join("; ")
    : "Made by leakscope · " + drawn + " charts drawn with uPlot.";
})();
