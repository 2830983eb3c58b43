// Tether dashboard: live figures. One EventSource on /events; each "snapshot" event carries
// {"figures": {"status.queued": 3, ...}} and every element with a matching data-live attribute
// gets the new text (a queue figure missing from the snapshot means the queue has no live job:
// 0, and a dash for its latency). No other script runs on these pages.
(function () {
  "use strict";
  var url = document.body.getAttribute("data-events");
  if (!url || !window.EventSource) { return; }
  var state = document.getElementById("live-state");
  var source = new EventSource(url);
  source.addEventListener("open", function () { if (state) { state.className = "live-state on"; } });
  source.addEventListener("error", function () { if (state) { state.className = "live-state off"; } });
  source.addEventListener("snapshot", function (event) {
    var figures;
    try { figures = JSON.parse(event.data).figures; } catch (e) { return; }
    var nodes = document.querySelectorAll("[data-live]");
    for (var i = 0; i < nodes.length; i++) {
      var key = nodes[i].getAttribute("data-live");
      var text = null;
      if (Object.prototype.hasOwnProperty.call(figures, key)) {
        text = String(figures[key]);
      } else if (key.indexOf("queue.") === 0) {
        // a queue left out of the snapshot holds no live job any more
        text = /\.latency$/.test(key) ? "\u2014" : "0";
      }
      if (text !== null && nodes[i].textContent !== text) { nodes[i].textContent = text; }
    }
    if (state) { state.className = "live-state on"; }
  });
})();
