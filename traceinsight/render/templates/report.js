// traceinsight report: progressive enhancement only (sorting, fix tabs, timeline zoom). Without it, all content shows.
(function () {
  "use strict";
  var root = document.documentElement;
  root.classList.remove("nojs");
  root.classList.add("js");

  function cellKey(td) {
    var v = td.getAttribute("data-sort");
    if (v === null) v = td.textContent;
    var n = parseFloat(v);
    return { num: !isNaN(n) && isFinite(v), n: n, s: String(v).toLowerCase() };
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    var ths = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(ths, function (th, col) {
      th.setAttribute("tabindex", "0");
      function sort() {
        var body = table.tBodies[0];
        var desc = !th.classList.contains("desc");
        Array.prototype.forEach.call(ths, function (h) { h.classList.remove("asc", "desc"); });
        th.classList.add(desc ? "desc" : "asc");
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = cellKey(a.cells[col]), y = cellKey(b.cells[col]);
          var c = x.num && y.num ? x.n - y.n : (x.s < y.s ? -1 : x.s > y.s ? 1 : 0);
          return desc ? -c : c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); } });
    });
  });

  Array.prototype.forEach.call(document.querySelectorAll(".fixes[data-tabs]"), function (box) {
    var panels = box.querySelectorAll(".fix");
    if (panels.length < 2) return;
    var bar = document.createElement("div");
    bar.className = "tabbar";
    bar.setAttribute("role", "tablist");
    function select(i) {
      Array.prototype.forEach.call(panels, function (p, j) {
        p.classList.toggle("active", i === j);
        bar.children[j].setAttribute("aria-selected", i === j ? "true" : "false");
      });
    }
    Array.prototype.forEach.call(panels, function (p, i) {
      var b = document.createElement("button");
      b.type = "button";
      b.setAttribute("role", "tab");
      var h = p.querySelector("h4");
      b.textContent = h ? h.textContent.replace(/^Fix in /, "") : "fix";
      b.addEventListener("click", function () { select(i); });
      bar.appendChild(b);
    });
    box.insertBefore(bar, box.firstChild);
    box.setAttribute("data-tabbed", "");
    select(0);
  });

  Array.prototype.forEach.call(document.querySelectorAll("svg.zoomable"), function (svg) {
    var vb = svg.viewBox.baseVal, full = { x: vb.x, w: vb.width }, drag = null;
    function set(x, w) {
      w = Math.max(20, Math.min(full.w, w));
      x = Math.max(full.x, Math.min(full.x + full.w - w, x));
      vb.x = x; vb.width = w;
    }
    svg.addEventListener("wheel", function (e) {
      if (!(e.ctrlKey || e.metaKey)) return;
      e.preventDefault();
      var r = svg.getBoundingClientRect(), f = (e.clientX - r.left) / r.width;
      var at = vb.x + f * vb.width, w = vb.width * (e.deltaY > 0 ? 1.25 : 0.8);
      set(at - f * w, w);
    }, { passive: false });
    svg.addEventListener("mousedown", function (e) { drag = { x: e.clientX, vx: vb.x }; svg.style.cursor = "grabbing"; });
    window.addEventListener("mouseup", function () { drag = null; svg.style.cursor = ""; });
    window.addEventListener("mousemove", function (e) {
      if (!drag) return;
      var r = svg.getBoundingClientRect();
      set(drag.vx - (e.clientX - drag.x) * vb.width / r.width, vb.width);
    });
    svg.addEventListener("dblclick", function () { set(full.x, full.w); });
  });
})();
