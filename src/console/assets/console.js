// toolhost console: keeps the open page live. The daemon sends a `catalog` event for every
// change this caller may see; the page then fetches its own live region again (the server
// renders it) and swaps it in. Forms the reader is filling in are outside that region.
"use strict";

(function () {
  const live = document.getElementById("live");
  const status = document.getElementById("live-status");
  if (!live || !status || !window.EventSource) {
    return;
  }
  let shown = Number(document.body.dataset.revision || 0);
  let fetching = false;
  let again = false;

  async function refresh() {
    if (fetching) {
      again = true;
      return;
    }
    fetching = true;
    try {
      const response = await fetch(window.location.href, {
        headers: { "x-console-fragment": "1" },
        credentials: "same-origin",
        cache: "no-store",
      });
      // A reason being typed into a form of the live region (a denial's) is not swept away:
      // the region waits until the field is left empty and unfocused.
      const typing = Array.from(live.querySelectorAll("input[type=text], textarea")).some(function (field) {
        return field.value !== "" || field === document.activeElement;
      });
      if (response.ok && !typing) {
        live.innerHTML = await response.text();
        const revision = Number(response.headers.get("x-catalog-revision") || shown);
        shown = Math.max(shown, revision);
        document.body.dataset.revision = String(shown);
      }
    } catch (error) {
      status.className = "down";
    } finally {
      fetching = false;
      if (again) {
        again = false;
        refresh();
      }
    }
  }

  // One stream while the page is shown, none while it is hidden or kept in the back/forward
  // cache: a stream held by a page nobody looks at would hold one of the few connections a
  // browser opens to a host, and the next page load would wait for it. A page shown again
  // reconnects, and the stream's first event (the revision now) catches it up.
  let events = null;

  function connect() {
    if (events || document.hidden) {
      return;
    }
    events = new EventSource("/events");
    events.addEventListener("open", function () {
      status.className = "up";
    });
    events.addEventListener("error", function () {
      status.className = "down";
    });
    events.addEventListener("catalog", function (event) {
      status.className = "up";
      // "approval": a call now waits for a person, which no revision counts.
      if (event.data === "approval" || Number(event.data) > shown) {
        refresh();
      }
    });
  }

  function disconnect() {
    if (events) {
      events.close();
      events = null;
    }
  }

  // Pages whose contents move without a catalog change (tasks, limits, a server's history)
  // also fetch their live region every `data-poll` milliseconds while they are shown.
  const poll = Number(document.body.dataset.poll || 0);
  if (poll > 0) {
    window.setInterval(function () {
      if (!document.hidden) {
        refresh();
      }
    }, poll);
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      disconnect();
    } else {
      connect();
      if (poll > 0) {
        refresh();
      }
    }
  });
  window.addEventListener("pagehide", disconnect);
  window.addEventListener("pageshow", connect);
  connect();
})();
