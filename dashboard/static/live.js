// lockscope live refresh: fetch the current page every few seconds and swap
// its <main id="content">. No framework; pages work without this script.
// Settings (paused, interval) persist in localStorage.
(function () {
  "use strict";
  var STORE = "lockscope.live";
  var INTERVALS = [2, 5, 10];

  function load() {
    var s = { paused: false, interval: 5 };
    try {
      var v = JSON.parse(localStorage.getItem(STORE) || "{}");
      if (typeof v.paused === "boolean") s.paused = v.paused;
      if (INTERVALS.indexOf(v.interval) >= 0) s.interval = v.interval;
    } catch (e) { /* private mode or bad JSON: defaults */ }
    return s;
  }
  function save(s) {
    try { localStorage.setItem(STORE, JSON.stringify(s)); } catch (e) { /* ignore */ }
  }

  function start() {
    var body = document.body;
    var box = document.getElementById("live");
    var toggle = document.getElementById("live-toggle");
    var select = document.getElementById("live-interval");
    var status = document.getElementById("live-status");
    if (!box || !toggle || !select || !status) return;
    var enabled = body.getAttribute("data-live") === "on";
    var s = load();
    var timer = null;
    var busy = false;

    box.hidden = false;
    select.value = String(s.interval);

    function render(text, state) {
      status.textContent = text;
      box.setAttribute("data-state", state);
    }
    function show() {
      if (!enabled) { box.hidden = true; return; } // forms and results do not refresh
      toggle.textContent = s.paused ? "Resume" : "Pause";
      toggle.setAttribute("aria-pressed", s.paused ? "true" : "false");
      render(s.paused ? "paused" : "live · " + s.interval + " s", s.paused ? "paused" : "on");
    }
    function schedule() {
      clearTimeout(timer);
      if (enabled && !s.paused) timer = setTimeout(tick, s.interval * 1000);
    }
    // Do not pull the page from under someone typing or choosing.
    function editing() {
      var a = document.activeElement;
      var main = document.getElementById("content");
      return a && main && main.contains(a) && /^(INPUT|SELECT|TEXTAREA)$/.test(a.tagName);
    }
    function tick() {
      if (busy || document.hidden || editing()) { schedule(); return; }
      busy = true;
      fetch(location.href, { credentials: "same-origin", headers: { "X-Lockscope-Live": "1" }, cache: "no-store" })
        .then(function (r) {
          if (!r.ok) throw new Error("HTTP " + r.status);
          return r.text();
        })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          var next = doc.getElementById("content");
          var cur = document.getElementById("content");
          if (!next || !cur) throw new Error("no content");
          if (!editing()) {
            cur.replaceWith(document.adoptNode(next));
            // The footer's "rendered" time is outside #content: keep it true.
            var was = document.querySelector('[data-testid="rendered"]');
            var now = doc.querySelector('[data-testid="rendered"]');
            if (was && now) was.textContent = now.textContent;
          }
          show();
        })
        .catch(function (err) { render("refresh failed: " + err.message, "error"); })
        .then(function () { busy = false; schedule(); });
    }

    toggle.addEventListener("click", function () {
      s.paused = !s.paused;
      save(s);
      show();
      if (!s.paused) tick(); else clearTimeout(timer);
    });
    select.addEventListener("change", function () {
      var v = parseInt(select.value, 10);
      if (INTERVALS.indexOf(v) >= 0) { s.interval = v; save(s); show(); schedule(); }
    });
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && enabled && !s.paused) tick();
    });
    show();
    schedule();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
