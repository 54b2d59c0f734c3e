// wisp console: keeps every section of the page live. The server renders each section
// (tables, SVG charts, logs); this fetches them again every 2 s and swaps them in.
"use strict";

(function () {
  const PERIOD_MS = 2000;
  const live = document.getElementById("live");

  function sectionsUrl() {
    const path = location.pathname === "/" ? "/sections/" : "/sections" + location.pathname;
    return path + location.search;
  }

  function setLive(ok, text) {
    if (!live) return;
    live.textContent = text;
    live.classList.toggle("stale", !ok);
  }

  async function refresh() {
    try {
      const resp = await fetch(sectionsUrl(), {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      });
      if (resp.status === 401) {
        location.assign("/login");
        return;
      }
      if (!resp.ok) {
        setLive(false, "error " + resp.status);
        return;
      }
      const sections = await resp.json();
      for (const [id, html] of Object.entries(sections)) {
        const el = document.querySelector('[data-section="' + id + '"]');
        if (el && el.innerHTML !== html) {
          el.innerHTML = html;
        }
      }
      setLive(true, "live · " + new Date().toLocaleTimeString());
    } catch (e) {
      setLive(false, "offline");
    }
  }

  if (document.querySelector("[data-section]")) {
    setInterval(refresh, PERIOD_MS);
  }
})();
