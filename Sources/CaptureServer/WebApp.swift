/// The camera web app served at `/`: one self-contained page (no outside resources); its player
/// (`WebPlayer`) picks WebRTC, fragmented MP4 or MJPEG; its overlay (`WebOverlay`) outlines the
/// codes and faces of `/metadata`. `?fit=contain|cover|fill` chooses the gravity, `?mirror=1`
/// mirrors the picture.
enum WebApp {
    static let page = #"""
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>swift-capture camera</title>
        <link rel="icon" href="/favicon.ico" type="image/svg+xml">
        <style>
          html, body { margin: 0; height: 100%; background: #111; color: #eee; font: 14px system-ui, sans-serif; }
          body { display: flex; flex-direction: column; }
          #view { flex: 1; min-height: 200px; position: relative; background: #000; }
          #live, #video, #boxes { position: absolute; inset: 0; width: 100%; height: 100%; object-fit: contain; }
          #boxes { pointer-events: none; }
          #view.mirrored #live, #view.mirrored #video { transform: scaleX(-1); }
          #badge { position: absolute; left: 8px; bottom: 8px; padding: 2px 8px; border-radius: 4px; background: #000a; }
          #sound { position: absolute; right: 8px; bottom: 8px; }
          #bar { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; padding: 8px; background: #222; }
          button { font-size: 16px; padding: 6px 14px; border-radius: 6px; border: 1px solid #555; background: #333; color: #eee; }
          #shutter { background: #b22; }
          #figures { margin-left: auto; font-variant-numeric: tabular-nums; }
          #controls { display: flex; flex-wrap: wrap; gap: 12px; padding: 0 8px 8px; background: #222; }
          #controls label { display: flex; gap: 6px; align-items: center; }
          #controls label.inactive { opacity: 0.5; }
          #controls output { min-width: 3em; font-variant-numeric: tabular-nums; }
          .switch { appearance: none; width: 34px; height: 18px; border-radius: 9px; background: #555; position: relative;
                    cursor: pointer; margin: 0; }
          .switch::after { content: ""; position: absolute; top: 2px; left: 2px; width: 14px; height: 14px; border-radius: 50%;
                           background: #ddd; transition: left 0.15s; }
          .switch:checked { background: #2a7; }
          .switch:checked::after { left: 18px; }
          #last { height: 64px; display: none; border: 1px solid #555; }
          #message { min-height: 1em; }
        </style>
        </head>
        <body>
        <div id="view">
          <video id="video" muted playsinline hidden></video>
          <img id="live" alt="live picture" hidden>
          <canvas id="boxes"></canvas>
          <span id="badge"><span id="path">…</span> <span id="latency"></span></span>
          <button id="sound" hidden title="play the camera's sound">Sound</button>
        </div>
        <div id="bar">
          <button id="shutter" title="take a still into the album">Shutter</button>
          <button id="toggle" title="switch to the other camera">Toggle camera</button>
          <label>Gravity
            <select id="gravity">
              <option value="contain">contain (resizeAspect)</option>
              <option value="cover">cover (resizeAspectFill)</option>
              <option value="fill">fill (resize)</option>
            </select>
          </label>
          <label><input type="checkbox" id="mirror"> Mirror</label>
          <img id="last" alt="last still">
          <span id="message"></span>
          <span id="figures">…</span>
        </div>
        <div id="controls"></div>
        <script>
        "use strict";
        const $ = (id) => document.getElementById(id);
        const live = $("live");
        function say(text) { $("message").textContent = text; }
        // What the server asks of a request that changes state (a cross-site form cannot send it).
        const post = { method: "POST", headers: { "X-Requested-With": "swift-capture" } };
        // (Only while the <img> shows: once a video plays, its stream is closed on purpose.)
        function reconnect() { if (document.body.dataset.picture === "jpeg") live.src = "stream?t=" + Date.now(); }
        $("gravity").addEventListener("change", (e) => {
          live.style.objectFit = e.target.value;
          $("video").style.objectFit = e.target.value;
        });
        $("mirror").addEventListener("change", (e) => $("view").classList.toggle("mirrored", e.target.checked));
        // The gravity and mirroring asked for in the address (?fit=cover&mirror=1).
        const pageQuery = new URLSearchParams(location.search);
        if (["contain", "cover", "fill"].includes(pageQuery.get("fit"))) {
          $("gravity").value = pageQuery.get("fit");
          $("gravity").dispatchEvent(new Event("change"));
        }
        if (pageQuery.get("mirror") === "1") {
          $("mirror").checked = true;
          $("mirror").dispatchEvent(new Event("change"));
        }
        $("shutter").addEventListener("click", async () => {
          say("taking a still…");
          try {
            const r = await fetch("api/still", post);
            const j = await r.json();
            if (!j.ok) { say(j.error); return; }
            $("last").src = j.result.url;
            $("last").style.display = "inline";
            say("saved " + j.result.name + " (" + j.result.bytes + " bytes)");
            document.body.dataset.stills = String(Number(document.body.dataset.stills || 0) + 1);
          } catch (e) { say("still failed: " + e); }
        });
        $("toggle").addEventListener("click", async () => {
          say("switching camera…");
          try {
            const r = await fetch("api/toggle", post);
            const j = await r.json();
            if (!j.ok) { say(j.error); return; }
            say("camera: " + j.result.camera);
            document.body.dataset.camera = j.result.id;
            setTimeout(loadControls, 300);
          } catch (e) { say("toggle failed: " + e); }
        });
        // Each control as its V4L2 type says: a switch for a boolean, a menu of the item names
        // the driver gives for a menu, a slider with its value for an integer, a button for a button.
        function control(c) {
          const label = document.createElement("label");
          label.dataset.id = c.id;
          label.dataset.type = c.type;
          label.classList.toggle("inactive", !!c.inactive);
          label.append(c.name);
          const set = async (value) => {
            const r = await fetch("api/control?id=" + c.id + "&value=" + value, post);
            const k = await r.json();
            say(k.ok ? c.name + " " + (names[k.result.value] ?? k.result.value) : k.error);
            // Setting an automatic mode makes others (in)active.
            if (k.ok && (c.type === "boolean" || c.type === "menu")) setTimeout(loadControls, 100);
            return k;
          };
          const names = {};
          let input;
          if (c.type === "boolean") {
            input = document.createElement("input");
            Object.assign(input, { type: "checkbox", role: "switch", checked: c.value !== 0 });
            input.className = "switch";
            input.addEventListener("change", () => set(input.checked ? 1 : 0));
          } else if ((c.type === "menu" || c.type === "integerMenu") && c.menu.length > 0) {
            input = document.createElement("select");
            for (const item of c.menu) {
              names[item.value] = item.name;
              const o = document.createElement("option");
              o.value = item.value;
              o.textContent = item.name;
              input.appendChild(o);
            }
            input.value = c.value;
            input.addEventListener("change", () => set(input.value));
          } else if (c.type === "button") {
            input = document.createElement("button");
            input.textContent = "Do";
            input.addEventListener("click", () => set(1));
          } else {
            input = document.createElement("input");
            Object.assign(input, { type: "range", min: c.minimum, max: c.maximum, step: Math.max(1, c.step), value: c.value });
            const shown = document.createElement("output");
            shown.textContent = c.value;
            input.addEventListener("input", () => { shown.textContent = input.value; });
            input.addEventListener("change", async () => {
              const k = await set(input.value);
              if (k.ok) { input.value = k.result.value; shown.textContent = k.result.value; }
            });
            label.append(input, shown);
            input.dataset.id = c.id;
            return label;
          }
          input.dataset.id = c.id;
          label.appendChild(input);
          return label;
        }
        async function loadControls() {
          const box = $("controls");
          try {
            const j = await (await fetch("api/controls")).json();
            box.textContent = "";
            for (const c of j.result.controls) {
              if (c.type !== "integer" || c.maximum > c.minimum) box.appendChild(control(c));
            }
          } catch (e) { box.textContent = "controls: " + e; }
        }
        let errors = 0;
        live.addEventListener("error", () => { errors += 1; setTimeout(reconnect, 1000); });
        async function poll() {
          try {
            const j = await (await fetch("state")).json();
            const r = j.result;
            $("figures").textContent = r.source.resolution.width + "×" + r.source.resolution.height + "  " +
              r.source.captured_fps + " fps  " + r.drops + " drops  " + r.stream.clients + " clients" +
              (r.source.online ? "" : "  offline");
          } catch (e) { $("figures").textContent = "no state: " + e; }
        }
        loadControls();
        poll();
        setInterval(poll, 1000);
        \#(WebPlayer.script)
        \#(WebOverlay.script)
        </script>
        </body>
        </html>
        """#

    /// The page's icon, served at `/favicon.ico` (an SVG: a camera on the page's dark grey).
    static let icon = #"""
        <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">
        <rect width="16" height="16" rx="3" fill="#222"/>
        <rect x="2" y="5" width="12" height="8" rx="1.5" fill="#eee"/>
        <rect x="5" y="3" width="6" height="3" rx="1" fill="#eee"/>
        <circle cx="8" cy="9" r="2.6" fill="#b22"/>
        </svg>
        """#
}
