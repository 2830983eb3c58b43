// Tether dashboard: live figures. One EventSource on /events; each "snapshot" event carries
// {"figures": {"status.queued": 3, ...}} and every element with a matching data-live attribute
// gets the new text. No other script runs on these pages.
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
      if (Object.prototype.hasOwnProperty.call(figures, key)) {
        var text = String(figures[key]);
        if (nodes[i].textContent !== text) { nodes[i].textContent = text; }
      }
    }
    if (state) { state.className = "live-state on"; }
  });
})();
