// leakscope report: the size and count formats the page's scripts share (the terminal's
// rules: binary units, three significant digits; thousands separated by commas).
window.lsFormat = (function () {
  "use strict";
  var UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  function bytes(n) {
    if (n == null || isNaN(n)) return "";
    var v = Math.abs(n);
    if (v < 1024) return (n < 0 ? "-" : "") + Math.round(v) + " B";
    var u = 0;
    while (v >= 1024 && u < UNITS.length - 1) { v /= 1024; u++; }
    var s = v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2);
    return (n < 0 ? "-" : "") + s + " " + UNITS[u];
  }
  function count(n) {
    return String(Math.round(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }
  return { bytes: bytes, count: count };
})();
