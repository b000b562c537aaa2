// Sortable and filterable tables and the per-query selector of the suite report (no libraries, no network).
(function () {
  "use strict";

  function sortKey(cell, type) {
    var raw = cell ? cell.getAttribute("data-sort") : null;
    if (raw === null) { raw = cell ? cell.textContent.trim() : ""; }
    if (type === "num") {
      var value = parseFloat(raw);
      return isNaN(value) ? null : value;
    }
    return raw.toLowerCase();
  }

  function sortTable(table, header) {
    var col = parseInt(header.getAttribute("data-col"), 10);
    var type = header.getAttribute("data-type") || "text";
    // Numbers sort best first on the first click, text A to Z.
    var descending = header.getAttribute("aria-sort") === "none" ? type === "num"
      : header.getAttribute("aria-sort") === "ascending";
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.forEach(function (row, i) { row.setAttribute("data-order", String(i)); });
    rows.sort(function (a, b) {
      var ka = sortKey(a.cells[col], type), kb = sortKey(b.cells[col], type);
      if (ka === null && kb === null) { return a.getAttribute("data-order") - b.getAttribute("data-order"); }
      if (ka === null) { return 1; }           // empty cells last in both directions
      if (kb === null) { return -1; }
      var cmp = ka < kb ? -1 : ka > kb ? 1 : 0;
      if (cmp === 0) { return a.getAttribute("data-order") - b.getAttribute("data-order"); }
      return descending ? -cmp : cmp;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(table.querySelectorAll("th.sort"), function (th) {
      th.setAttribute("aria-sort", "none");
    });
    header.setAttribute("aria-sort", descending ? "descending" : "ascending");
  }

  function applyFilters(table) {
    var text = document.querySelector('.row-filter[data-table="' + table.id + '"]');
    var sig = document.querySelector('.sig-filter[data-table="' + table.id + '"]');
    var needle = text ? text.value.trim().toLowerCase() : "";
    var onlySignificant = sig ? sig.checked : false;
    Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
      var show = row.textContent.toLowerCase().indexOf(needle) !== -1;
      if (onlySignificant && row.getAttribute("data-significant") !== "yes") { show = false; }
      row.hidden = !show;
    });
  }

  function showQueryGroup() {
    var wanted = {
      system: document.getElementById("pq-system"),
      benchmark: document.getElementById("pq-benchmark"),
      metric: document.getElementById("pq-metric")
    };
    if (!wanted.system) { return; }
    Array.prototype.forEach.call(document.querySelectorAll(".pq-group"), function (group) {
      group.hidden = !(group.getAttribute("data-system") === wanted.system.value &&
        group.getAttribute("data-benchmark") === wanted.benchmark.value &&
        group.getAttribute("data-metric") === wanted.metric.value);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
      Array.prototype.forEach.call(table.querySelectorAll("th.sort"), function (th) {
        th.tabIndex = 0;
        th.addEventListener("click", function () { sortTable(table, th); });
        th.addEventListener("keydown", function (event) {
          if (event.key === "Enter" || event.key === " ") { event.preventDefault(); sortTable(table, th); }
        });
      });
    });
    Array.prototype.forEach.call(document.querySelectorAll(".row-filter, .sig-filter"), function (input) {
      var table = document.getElementById(input.getAttribute("data-table"));
      input.addEventListener("input", function () { applyFilters(table); });
      input.addEventListener("change", function () { applyFilters(table); });
    });
    ["pq-system", "pq-benchmark", "pq-metric"].forEach(function (id) {
      var select = document.getElementById(id);
      if (select) { select.addEventListener("change", showQueryGroup); }
    });
    showQueryGroup();
  });
}());
