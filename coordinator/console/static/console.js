// Podium web console: the live parts. Every page reads without this script;
// it follows a running task's log (server-sent events), refreshes the task
// list, and loads earlier pages of a long log in place.
(function () {
  "use strict";

  // The task list: fetch its rows again every few seconds (first page only).
  function liveList() {
    var table = document.getElementById("tasks");
    if (!table || !table.dataset.live) return;
    var body = document.getElementById("task-rows");
    var busy = false;
    setInterval(function () {
      if (busy || document.hidden) return;
      busy = true;
      fetch(table.dataset.live, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) { if (html !== null) body.innerHTML = html; })
        .catch(function () {})
        .then(function () { busy = false; });
    }, 3000);
  }

  function nearBottom(el) { return el.scrollHeight - el.scrollTop - el.clientHeight < 40; }

  // The task page: append the log's new lines and follow the state.
  function liveLog() {
    var log = document.getElementById("log");
    if (!log || !log.dataset.events || typeof EventSource === "undefined") return;
    log.scrollTop = log.scrollHeight;
    var src = new EventSource(log.dataset.events);
    var count = document.getElementById("log-count");
    src.addEventListener("line", function (e) {
      var follow = nearBottom(log);
      log.insertAdjacentHTML("beforeend", e.data);
      if (count) count.textContent = String(parseInt(e.lastEventId, 10) - 1);
      if (follow) log.scrollTop = log.scrollHeight;
    });
    src.addEventListener("state", function (e) {
      var parts = e.data.split(" ");
      var st = document.getElementById("task-state");
      if (st) { st.textContent = parts[0]; st.className = "state state-" + parts[0]; }
      var un = document.getElementById("task-unschedulable");
      if (un && parts[0] !== "queued") un.remove();
      var exit = document.getElementById("exit-code");
      if (exit && parts[1] !== undefined) exit.textContent = parts[1];
    });
    function done() {
      src.close();
      ["cancel", "message"].forEach(function (id) {
        var f = document.getElementById(id);
        if (f) f.remove();
      });
    }
    src.addEventListener("end", done);
    src.addEventListener("failed", function () { src.close(); });
  }

  // "Earlier lines": fetch the page before the first line shown and put it
  // on top, keeping what is on screen where it was.
  function earlier() {
    var a = document.getElementById("log-earlier");
    var log = document.getElementById("log");
    if (!a || !log) return;
    a.addEventListener("click", function (ev) {
      ev.preventDefault();
      var first = parseInt(a.dataset.from, 10);
      if (!(first > 1)) return;
      var from = Math.max(1, first - 1000);
      fetch(a.dataset.src + "?from=" + from + "&limit=" + (first - from), { credentials: "same-origin" })
        .then(function (r) { if (!r.ok) throw new Error(String(r.status)); return r.text(); })
        .then(function (html) {
          var h = log.scrollHeight;
          log.insertAdjacentHTML("afterbegin", html);
          log.scrollTop += log.scrollHeight - h;
          a.dataset.from = String(from);
          a.href = a.href.replace(/from=\d+/, "from=" + Math.max(1, from - 1000));
          if (from <= 1) a.remove();
        })
        .catch(function () { window.location = a.href; });
    });
  }

  // A link to a line not on this page (#L123): open the page that has it.
  function jumpToLine() {
    var m = /^#L(\d+)$/.exec(window.location.hash);
    var log = document.getElementById("log");
    if (!m || !log || document.getElementById("L" + m[1])) return;
    var n = parseInt(m[1], 10);
    var url = new URL(window.location.href);
    url.searchParams.set("from", String(Math.max(1, n - 500)));
    window.location.replace(url.toString());
  }

  function start() { jumpToLine(); liveList(); liveLog(); earlier(); }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
