// leakscope report: the allocation timeline (memory_viz's Active Memory Timeline) and the
// segment map at a point (its Allocator State). Every allocation the data draws one by one
// is a band from the event that made it to the event that freed it, stacked in the order
// they were made over the summed rest (grey). Drawn per pixel column into an image, so a
// page with thousands of bands over a million events redraws in milliseconds. report.js
// calls lsAllocations.draw(dev, setRange) per device and lsAllocations.setRange when its
// charts zoom; with "#ls-selftest" in the URL the view checks its own hover, click, search
// and state view and writes the results into data attributes (the browser test reads them).
(function () {
  "use strict";
  var fmtBytes = window.lsFormat.bytes, fmtCount = window.lsFormat.count;
  // Tick steps at powers of two (256 MiB, 512 MiB, 1 GiB), at most six on the axis.
  function binaryStep(max) {
    var step = 1;
    while (max / step > 6) step *= 2;
    return step;
  }
  var ROLE_COLORS = {
    parameter: [78, 121, 167], gradient: [242, 142, 43], optimizer_state: [176, 122, 161],
    activation: [89, 161, 79], temporary: [237, 201, 72], untraced: [156, 117, 95],
    unknown: [118, 183, 178]
  };
  var PALETTE = [[78, 121, 167], [242, 142, 43], [225, 87, 89], [118, 183, 178], [89, 161, 79],
                 [237, 201, 72], [176, 122, 161], [255, 157, 167], [156, 117, 95]];
  function hash(s) {
    var h = 2166136261;
    for (var i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
    return h >>> 0;
  }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text != null) e.textContent = text;
    return e;
  }
  function alive(b, e) {
    return (b.first_event == null || b.first_event <= e) && (b.free_event == null || b.free_event > e);
  }
  function fill(buf, W, H, x, y0, y1, color) {
    var a = H - Math.round(y1), b = H - Math.round(y0);
    if (a < 0) a = 0;
    for (var r = a; r < b; r++) buf[r * W + x] = color;
  }

  var views = {};

  function View(dev, setRange) {
    var a = dev.allocations;
    this.dev = dev; this.a = a; this.setRangeOut = setRange;
    this.root = document.getElementById("allocations-" + dev.device);
    this.n = a.events;
    this.bands = a.allocations;
    this.colorBy = "role";
    this.allFrames = false;
    this.match = null;
    this.pinned = -1;
    this.useTime = a.time.events.length > 1;
    // Requested bytes after every event (drawn + summarized): a column shows the event
    // with the most in its span, so no peak disappears when zoomed out.
    var n = this.n, total = new Float64Array(n), s = a.summarized, i, j = 0;
    var cur = s.before_first_event, delta = new Float64Array(n + 1), live = 0;
    this.bands.forEach(function (b) {
      if (b.first_event == null) live += b.bytes; else delta[b.first_event] += b.bytes;
      if (b.free_event != null) delta[b.free_event] -= b.bytes;
    });
    for (i = 0; i < n; i++) {
      live += delta[i];
      while (j < s.events.length && s.events[j] <= i) { cur = s.bytes[j]; j++; }
      total[i] = live + cur;
    }
    this.total = total;
    this.x0 = 0; this.x1 = Math.max(n - 1, 1);
    this.build();
  }

  View.prototype.build = function () {
    var self = this, r = this.root, d = this.dev.device;
    var bar = el("div", { "class": "alloc-controls" });
    var search = el("input", { type: "search", id: "alloc-search-" + d, placeholder: "filter bands by frame regex" });
    search.addEventListener("input", function () { self.search(search.value); });
    var color = el("select", { id: "alloc-color-" + d });
    color.appendChild(el("option", { value: "role" }, "colour by role"));
    color.appendChild(el("option", { value: "site" }, "colour by site"));
    color.addEventListener("change", function () { self.colorBy = color.value; self.draw(); });
    var axis = el("select", { id: "alloc-axis-" + d });
    if (this.useTime) axis.appendChild(el("option", { value: "time" }, "x: time"));
    axis.appendChild(el("option", { value: "event" }, "x: event"));
    axis.addEventListener("change", function () { self.useTime = axis.value === "time"; self.draw(); });
    var reset = el("button", { type: "button" }, "zoom out");
    reset.addEventListener("click", function () { self.zoom(0, self.n - 1, true); });
    this.matchInfo = el("span", { "class": "hint", id: "alloc-matches-" + d });
    [search, color, axis, reset, this.matchInfo].forEach(function (x) { bar.appendChild(x); });
    r.appendChild(bar);
    var wrap = el("div", { "class": "alloc-wrap" });
    this.canvas = el("canvas", { id: "alloc-canvas-" + d, "class": "alloc-canvas" });
    this.tip = el("div", { "class": "alloc-tip", id: "alloc-tip-" + d });
    this.tip.style.display = "none";
    this.sel = el("div", { "class": "alloc-sel" });
    this.sel.style.display = "none";
    wrap.appendChild(this.canvas); wrap.appendChild(this.tip); wrap.appendChild(this.sel);
    r.appendChild(wrap);
    this.axisInfo = el("p", { "class": "hint", id: "alloc-axis-info-" + d });
    r.appendChild(this.axisInfo);
    var panels = el("div", { "class": "alloc-panels" });
    this.stackPanel = el("div", { "class": "alloc-stack", id: "alloc-stack-" + d });
    this.stackPanel.appendChild(el("p", { "class": "hint" }, "Click a band to pin its stack here."));
    this.statePanel = el("div", { "class": "alloc-state", id: "alloc-state-" + d });
    this.statePanel.appendChild(el("p", { "class": "hint" }, "Click the timeline to open the segment map at that point."));
    panels.appendChild(this.stackPanel); panels.appendChild(this.statePanel);
    r.appendChild(panels);
    var c = this.canvas, down = null;
    c.addEventListener("mousemove", function (e) {
      var p = self.pos(e);
      if (down != null && Math.abs(p.x - down) > 5) {
        var x0 = Math.min(down, p.x), x1 = Math.max(down, p.x);
        self.sel.style.display = "block"; self.sel.style.left = x0 + "px";
        self.sel.style.width = (x1 - x0) + "px"; self.sel.style.height = self.h + "px";
        return;
      }
      self.hover(p.x, p.y);
    });
    c.addEventListener("mouseleave", function () { self.tip.style.display = "none"; });
    c.addEventListener("mousedown", function (e) { down = self.pos(e).x; });
    window.addEventListener("mouseup", function (e) {
      if (down == null) return;
      var x = self.pos(e).x, from = down;
      down = null; self.sel.style.display = "none";
      if (Math.abs(x - from) > 5) {
        self.dragged = true;
        self.zoom(self.eventAt(Math.min(x, from)), self.eventAt(Math.max(x, from)), true);
      }
    });
    c.addEventListener("click", function (e) {
      if (self.dragged) { self.dragged = false; return; }
      var p = self.pos(e); self.click(p.x, p.y);
    });
    c.addEventListener("dblclick", function () { self.zoom(0, self.n - 1, true); });
  };

  View.prototype.pos = function (e) {
    var r = this.canvas.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  };

  // The event index at time `t` (linear between the sampled events), and back.
  View.prototype.eventOfTime = function (t) {
    var ev = this.a.time.events, tm = this.a.time.time_us, lo = 0, hi = tm.length - 1;
    if (t <= tm[0]) return ev[0];
    if (t >= tm[hi]) return ev[hi];
    while (hi - lo > 1) { var m = (lo + hi) >> 1; if (tm[m] <= t) lo = m; else hi = m; }
    var span = tm[hi] - tm[lo];
    return ev[lo] + (span > 0 ? (t - tm[lo]) / span : 0) * (ev[hi] - ev[lo]);
  };
  View.prototype.timeOfEvent = function (e) {
    var ev = this.a.time.events, tm = this.a.time.time_us, lo = 0, hi = ev.length - 1;
    if (e <= ev[0]) return tm[0];
    if (e >= ev[hi]) return tm[hi];
    while (hi - lo > 1) { var m = (lo + hi) >> 1; if (ev[m] <= e) lo = m; else hi = m; }
    return tm[lo] + (e - ev[lo]) / (ev[hi] - ev[lo]) * (tm[hi] - tm[lo]);
  };
  // The event under pixel column x (fractional).
  View.prototype.eventAt = function (x) {
    var f = Math.min(Math.max(x / this.w, 0), 1);
    if (!this.useTime) return this.x0 + f * (this.x1 - this.x0);
    var t0 = this.timeOfEvent(this.x0), t1 = this.timeOfEvent(this.x1);
    return this.eventOfTime(t0 + f * (t1 - t0));
  };

  View.prototype.zoom = function (x0, x1, tell) {
    x0 = Math.max(0, Math.floor(x0)); x1 = Math.min(this.n - 1, Math.ceil(x1));
    this.x0 = x0; this.x1 = Math.max(x1, x0 + 1);
    this.draw();
    if (tell && this.setRangeOut) this.setRangeOut(this.x0, this.x1);
  };

  // Per column: the event shown (the one with the most bytes in the column's span).
  View.prototype.columns = function () {
    var cols = new Int32Array(this.w), total = this.total, n = this.n;
    for (var x = 0; x < this.w; x++) {
      var a = Math.min(n - 1, Math.max(0, Math.floor(this.eventAt(x))));
      var b = Math.min(n - 1, Math.floor(this.eventAt(x + 1)));
      var best = a;
      for (var e = a + 1; e <= b; e++) if (total[e] > total[best]) best = e;
      cols[x] = best;
    }
    return cols;
  };

  View.prototype.summarizedAt = function (e) {
    var s = this.a.summarized, lo = 0, hi = s.events.length;
    while (lo < hi) { var m = (lo + hi) >> 1; if (s.events[m] <= e) lo = m + 1; else hi = m; }
    return lo === 0 ? s.before_first_event : s.bytes[lo - 1];
  };

  View.prototype.color = function (i) {
    var b = this.bands[i], c;
    if (this.colorBy === "site") c = PALETTE[hash(b.site) % PALETTE.length];
    else c = ROLE_COLORS[b.role] || PALETTE[hash(b.role) % PALETTE.length];
    // Neighbours differ in shade, so two bands of one colour stay apart.
    var k = [1, 0.82, 0.66][i % 3], r = c[0] * k, g = c[1] * k, bl = c[2] * k;
    if (this.match && !this.match[i]) { r = 235; g = 235; bl = 235; }
    if (i === this.pinned) { r = 20; g = 20; bl = 20; }
    return (255 << 24) | (bl << 16) | (g << 8) | r;
  };

  View.prototype.draw = function () {
    var c = this.canvas;
    this.w = Math.max(320, (this.root.clientWidth || 900) - 4);
    this.h = 360;
    c.width = this.w; c.height = this.h;
    c.style.width = this.w + "px"; c.style.height = this.h + "px";
    var ctx = c.getContext("2d"), W = this.w, H = this.h, x, i;
    var cols = this.columns();
    this.cols = cols;
    var ymax = 1;
    for (x = 0; x < W; x++) ymax = Math.max(ymax, this.total[cols[x]]);
    var step = binaryStep(ymax * 1.05);
    ymax = Math.ceil(ymax * 1.05 / step) * step;
    this.ymax = ymax;
    var img = ctx.createImageData(W, H), buf = new Uint32Array(img.data.buffer);
    buf.fill(0xffffffff);
    var grey = (255 << 24) | (186 << 16) | (176 << 8) | 176;
    var per = H / ymax, bands = this.bands, nb = bands.length, colors = new Uint32Array(nb);
    for (i = 0; i < nb; i++) colors[i] = this.color(i);
    for (x = 0; x < W; x++) {
      var e = cols[x], y = this.summarizedAt(e) * per;
      fill(buf, W, H, x, 0, y, grey);
      for (i = 0; i < nb; i++) {
        var b = bands[i];
        if (!alive(b, e)) continue;
        var y1 = y + b.bytes * per;
        fill(buf, W, H, x, y, y1, colors[i]);
        y = y1;
      }
    }
    ctx.putImageData(img, 0, 0);
    // Byte ticks at binary steps.
    ctx.fillStyle = "#3d464f"; ctx.strokeStyle = "rgba(0,0,0,0.15)"; ctx.font = "11px system-ui, sans-serif";
    for (var v = step; v < ymax; v += step) {
      var py = H - v * per;
      ctx.beginPath(); ctx.moveTo(0, py); ctx.lineTo(W, py); ctx.stroke();
      ctx.fillText(fmtBytes(v), 4, py - 2);
    }
    var t0 = this.a.time.time_us.length ? this.a.time.time_us[0] : 0;
    this.axisInfo.textContent = (this.useTime
      ? "x: time, " + ((this.timeOfEvent(this.x0) - t0) / 1e3).toFixed(1) + " ms to " +
        ((this.timeOfEvent(this.x1) - t0) / 1e3).toFixed(1) + " ms after the first event; "
      : "x: event index; ") + "events " + fmtCount(cols[0]) + " to " + fmtCount(cols[W - 1]) +
      " of " + fmtCount(this.n) + "; " + fmtCount(nb) + " allocations drawn one by one, " +
      fmtCount(this.a.summarized.allocations) + " summed in the grey band (exact after every event). " +
      "Drag to zoom (the charts above and below follow), double-click to zoom out.";
    this.root.dataset.drawn = String(nb);
  };

  // The band under (x, y): -1 for the summarized band, null for none.
  View.prototype.bandAt = function (x, y) {
    if (!this.cols) return null;
    x = Math.max(0, Math.min(this.w - 1, Math.floor(x)));
    var e = this.cols[x], per = this.h / this.ymax, want = (this.h - y) / per;
    var acc = this.summarizedAt(e);
    if (want < acc) return { band: -1, event: e };
    for (var i = 0; i < this.bands.length; i++) {
      var b = this.bands[i];
      if (!alive(b, e)) continue;
      acc += b.bytes;
      if (want < acc) return { band: i, event: e };
    }
    return { band: null, event: e };
  };

  View.prototype.when = function (e) {
    if (e == null) return null;
    var tm = this.a.time.time_us;
    return "event " + fmtCount(e) + (tm.length ? " (" + ((this.timeOfEvent(e) - tm[0]) / 1e3).toFixed(2) + " ms)" : "");
  };

  View.prototype.describe = function (i) {
    if (i === -1) return fmtCount(this.a.summarized.allocations) + " smaller allocations, summed";
    var b = this.bands[i];
    var names = b.names ? Object.keys(b.names).map(function (k) { return k + " " + b.names[k]; }) : [];
    return fmtBytes(b.bytes) + " (" + fmtCount(b.bytes) + " B) · " + b.role + " · " + b.site +
      (names.length ? " · " + names.join(", ") : "") +
      " · from " + (this.when(b.first_event) || "before the trace") +
      " to " + (this.when(b.free_event) || "the end (never freed)");
  };

  View.prototype.hover = function (x, y) {
    var hit = this.bandAt(x, y);
    if (!hit || hit.band == null) { this.tip.style.display = "none"; return; }
    this.tip.textContent = this.describe(hit.band) + " · shown: after event " + fmtCount(hit.event);
    this.tip.dataset.band = String(hit.band);
    this.tip.style.display = "block";
    this.tip.style.left = Math.max(0, Math.min(x + 12, this.w - 330)) + "px";
    this.tip.style.top = Math.max(0, y - 40) + "px";
  };

  View.prototype.frames = function (k) {
    var a = this.a, all = this.allFrames;
    return (a.stacks[k] || []).map(function (f) { return a.frames[f]; })
      .filter(function (f) { return all || f.python; });
  };

  View.prototype.showStack = function (i) {
    var p = this.stackPanel, self = this, b = this.bands[i];
    p.textContent = "";
    p.dataset.band = String(i);
    p.appendChild(el("h4", {}, this.describe(i)));
    var t = el("label", {});
    var box = el("input", { type: "checkbox", id: "alloc-allframes-" + this.dev.device });
    box.checked = this.allFrames;
    box.addEventListener("change", function () { self.allFrames = box.checked; self.showStack(i); });
    t.appendChild(box);
    t.appendChild(document.createTextNode(" C++ and interpreter frames too"));
    p.appendChild(t);
    if (b.stack == null) p.appendChild(el("p", { "class": "hint" }, "no stack recorded for this allocation"));
    [["allocated at", b.stack], ["freed at", b.free_stack]].forEach(function (s) {
      if (s[1] == null) return;
      var fr = self.frames(s[1]);
      p.appendChild(el("h5", {}, s[0] + " (" + fr.length + " frames" + (self.allFrames ? "" : ", Python only") + ", innermost first)"));
      var ol = el("ol", { "class": "frames" });
      fr.forEach(function (f) { ol.appendChild(el("li", { "class": f.python ? "py" : "native" }, f.label)); });
      p.appendChild(ol);
    });
  };

  View.prototype.click = function (x, y) {
    var hit = this.bandAt(x, y);
    if (!hit) return;
    if (hit.band != null && hit.band >= 0) {
      this.pinned = hit.band;
      this.showStack(hit.band);
      this.draw();
    }
    this.showState(hit.event);
  };

  // The segment map the page holds at or before event `e` (it keeps a few).
  View.prototype.showState = function (e) {
    var states = this.dev.states || [], pick = null;
    states.forEach(function (s) { if (s.event_index <= e) pick = s; });
    if (!pick && states.length) pick = states[0];
    var p = this.statePanel;
    p.textContent = "";
    if (!pick) { p.appendChild(el("p", {}, "No segment map stored for this device.")); return; }
    p.dataset.event = String(pick.event_index);
    p.appendChild(el("h4", {}, "Segments after event " + fmtCount(pick.event_index) +
      (pick.event_index === Math.round(e) ? "" : " (the stored point nearest to event " + fmtCount(e) +
      "; `leakscope segments FILE --at event:" + Math.round(e) + "` gives that one)")));
    var t = pick.totals;
    p.appendChild(el("p", { "class": "hint" }, fmtCount(t.segments) + " segments, " + fmtBytes(t.reserved_bytes) +
      " reserved, " + fmtBytes(t.active_bytes) + " active, " + fmtBytes(t.external_free_bytes) + " free between blocks"));
    var order = pick.segments.map(function (s, k) { return k; })
      .sort(function (a, b) { return pick.segments[b][1] - pick.segments[a][1]; });
    var shown = order.slice(0, 200), W = Math.max(320, (p.clientWidth || 600) - 8), row = 10;
    var c = el("canvas", { "class": "segments", id: "alloc-segments-" + this.dev.device });
    c.width = W; c.height = Math.max(1, shown.length * row);
    var ctx = c.getContext("2d"), big = shown.length ? pick.segments[shown[0]][1] : 1;
    shown.forEach(function (k, r) {
      var size = pick.segments[k][1], w = Math.max(2, size / big * W), y = r * row, bl = pick.blocks[k];
      ctx.fillStyle = "#e6e9ec"; ctx.fillRect(0, y, w, row - 2);
      for (var i = 0; i < bl.length; i += 3) {
        ctx.fillStyle = bl[i + 2] ? "#f28e2b" : "#4e79a7";
        ctx.fillRect(bl[i] / size * w, y, Math.max(1, bl[i + 1] / size * w), row - 2);
      }
    });
    p.appendChild(c);
    p.dataset.segments = String(shown.length);
    if (order.length > shown.length) {
      p.appendChild(el("p", { "class": "hint" }, (order.length - shown.length) + " smaller segments not drawn"));
    }
    p.appendChild(el("p", { "class": "hint" }, "A row per segment, largest first. Blue: active blocks; orange: freed, waiting for other streams; grey: free space."));
  };

  View.prototype.search = function (text) {
    var a = this.a;
    if (!text) { this.match = null; this.matchInfo.textContent = ""; this.draw(); return 0; }
    var re;
    try { re = new RegExp(text); } catch (e) { this.matchInfo.textContent = "not a regex: " + e.message; return -1; }
    var hitStack = {};
    this.match = this.bands.map(function (b) {
      if (b.stack == null) return false;
      if (!(b.stack in hitStack)) {
        hitStack[b.stack] = (a.stacks[b.stack] || []).some(function (f) { return re.test(a.frames[f].label); });
      }
      return hitStack[b.stack];
    });
    var k = this.match.filter(Boolean).length;
    this.matchInfo.textContent = fmtCount(k) + " of " + fmtCount(this.bands.length) + " bands match";
    this.matchInfo.dataset.matches = String(k);
    this.draw();
    return k;
  };

  // The browser test's checks, through the DOM: hover and click on the largest band show
  // its site and stack, the search keeps the bands of its frame, the state view opens.
  View.prototype.selftest = function () {
    var out = {}, self = this, per = this.h / this.ymax;
    // The largest band with a stack that some column shows at least 2 px high, and the
    // middle of its span there.
    var order = this.bands.map(function (b, i) { return i; })
      .filter(function (i) { return self.bands[i].stack != null; })
      .sort(function (x, y) { return self.bands[y].bytes - self.bands[x].bytes; });
    var best = -1, hitX = -1, hitY = -1;
    for (var k = 0; k < order.length && best < 0; k++) {
      var b = this.bands[order[k]];
      if (b.bytes * per < 2) break;
      for (var x = 0; x < this.w; x++) {
        var e = this.cols[x];
        if (!alive(b, e)) continue;
        var below = this.summarizedAt(e);
        for (var i = 0; i < order[k]; i++) if (alive(this.bands[i], e)) below += this.bands[i].bytes;
        best = order[k]; hitX = x; hitY = this.h - (below + b.bytes / 2) * per;
        break;
      }
    }
    if (best < 0) { this.root.dataset.selftest = "no band with a stack drawn 2 px high"; return; }
    b = this.bands[best];
    var rect = this.canvas.getBoundingClientRect();
    var ev = { clientX: rect.left + hitX + 0.5, clientY: rect.top + hitY, bubbles: true };
    this.canvas.dispatchEvent(new MouseEvent("mousemove", ev));
    out.hover = this.tip.style.display === "block" && this.tip.textContent.indexOf(b.site) >= 0
      ? "ok" : "tip: " + this.tip.textContent;
    this.canvas.dispatchEvent(new MouseEvent("click", ev));
    var first = this.stackPanel.querySelector("ol.frames");
    var li = first ? first.querySelectorAll("li") : [], frames = this.frames(b.stack);
    out.click = li.length === frames.length && li.length > 0 && li[0].textContent === frames[0].label
      ? "ok" : "stack: " + li.length + " of " + frames.length;
    out.state = this.statePanel.dataset.event != null && Number(this.statePanel.dataset.segments) > 0
      ? "ok" : "no state";
    var label = frames.length ? frames[0].label : "";
    k = this.search("^" + label.replace(/[.*+?^${}()|[\]\\]/g, "\\$&") + "$");
    var expect = this.bands.filter(function (x) {
      return x.stack != null && self.a.stacks[x.stack].some(function (f) { return self.a.frames[f].label === label; });
    }).length;
    out.search = k === expect && k > 0 ? "ok" : "search: " + k + " vs " + expect;
    this.search("");
    var all = ["hover", "click", "state", "search"].every(function (n) { return out[n] === "ok"; });
    this.root.dataset.selftest = all ? "ok" : JSON.stringify(out);
  };

  window.lsAllocations = {
    // Draws device `dev`'s view; false when there is nothing to draw (a message instead).
    draw: function (dev, setRange) {
      var root = document.getElementById("allocations-" + dev.device);
      if (!root || !dev.allocations) return false;
      if (!dev.allocations.events) {
        root.textContent = "No trace recorded on this device: the file holds the state at the dump only.";
        return false;
      }
      var t0 = performance.now();
      var v = new View(dev, setRange);
      views[dev.device] = v;
      v.draw();
      root.dataset.drawMs = String(Math.round(performance.now() - t0));
      if (location.hash === "#ls-selftest") v.selftest();
      return true;
    },
    // The device's other charts zoomed to events [min, max].
    setRange: function (device, min, max) {
      var v = views[device];
      if (v && min != null && max != null) v.zoom(min, max, false);
    }
  };
})();
