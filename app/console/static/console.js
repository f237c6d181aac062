// fedcd console: live job progress. Elements with data-poll="<console JSON URL>" are refreshed from the gateway
// (the session cookie authenticates; no API key is ever in this script or the page). Nothing else needs JavaScript.
(function () {
  "use strict";
  var TERMINAL = { succeeded: true, failed: true, cancelled: true };
  var PERIOD_MS = 1000;

  function update(el, job) {
    var status = el.querySelector("[data-field=status]");
    if (status) {
      status.textContent = "";
      var badge = document.createElement("span");
      badge.className = "status status-" + job.status;
      badge.textContent = job.status;
      status.appendChild(badge);
    }
    var done = el.querySelector("[data-field=done]");
    if (done) { done.textContent = job.done + " / " + job.total; }
    var bar = el.querySelector("progress");
    if (bar) { bar.max = job.total || 1; bar.value = job.done; }
  }

  function when(iso) {  // "2026-12-01T21:21:05.1+00:00" -> "2026-12-01 21:21 UTC", as the server writes it
    return String(iso).slice(0, 16).replace("T", " ") + " UTC";
  }

  function history(job) {  // the job page's history table, row by row (text only: never HTML from the server)
    var body = document.querySelector("#history tbody");
    if (!body || !job.history) { return; }
    body.textContent = "";
    job.history.forEach(function (e) {
      var row = body.insertRow();
      row.insertCell().textContent = when(e.at);
      var badge = document.createElement("span");
      badge.className = "status status-" + e.status;
      badge.textContent = e.status;
      row.insertCell().appendChild(badge);
      row.insertCell().textContent = e.worker || "";
      row.insertCell().textContent = e.message;
    });
  }

  function poll(el) {
    fetch(el.getAttribute("data-poll"), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (r.status === 401) { window.location.reload(); return null; }  // signed out: the page asks to sign in
        return r.ok ? r.json() : null;
      })
      .then(function (job) {
        if (job) {
          var was = el.getAttribute("data-status");
          update(el, job);
          if (el.hasAttribute("data-reload")) { history(job); }
          el.setAttribute("data-status", job.status);
          if (TERMINAL[job.status]) {
            if (el.hasAttribute("data-reload") && was !== job.status) { window.location.reload(); }
            return;
          }
        }
        window.setTimeout(function () { poll(el); }, PERIOD_MS);
      })
      .catch(function () { window.setTimeout(function () { poll(el); }, PERIOD_MS * 5); });
  }

  document.querySelectorAll("[data-poll]").forEach(function (el) {
    if (!TERMINAL[el.getAttribute("data-status")]) { poll(el); }
  });
})();
