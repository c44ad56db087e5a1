/* The explorers' precomputed states (course/static_states.py): show one at a time.
   No Python, no network; without this script the first state (the static twin) shows. */
(function () {
  "use strict";
  function setUp(box) {
    var panels = Array.prototype.slice.call(box.querySelectorAll(":scope > .site-state"));
    var picks = Array.prototype.slice.call(box.querySelectorAll(".site-pick"));
    var label = box.querySelector(".site-label");
    var prev = box.querySelector(".site-prev"), next = box.querySelector(".site-next");
    var current = 0;
    function show(k) {
      current = Math.max(0, Math.min(panels.length - 1, k));
      panels.forEach(function (p, i) { p.hidden = i !== current; });
      picks.forEach(function (b, i) { b.setAttribute("aria-pressed", i === current ? "true" : "false"); });
      if (label) { label.textContent = panels[current].getAttribute("data-label"); }
      if (prev) { prev.disabled = current === 0; }
      if (next) { next.disabled = current === panels.length - 1; }
      box.setAttribute("data-current", String(current));
    }
    picks.forEach(function (b) {
      b.addEventListener("click", function () { show(parseInt(b.getAttribute("data-k"), 10)); });
    });
    if (prev) { prev.addEventListener("click", function () { show(current - 1); }); }
    if (next) { next.addEventListener("click", function () { show(current + 1); }); }
    box.classList.add("site-ready");
    show(0);
  }
  function setUpAll() {
    document.querySelectorAll(".site-states").forEach(setUp);
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUpAll);
  } else {
    setUpAll();
  }
})();
