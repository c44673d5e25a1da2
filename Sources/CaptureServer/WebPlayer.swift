/// The web app's player: the best path the server offers, in order WebRTC (WHEP at `/whep`),
/// fragmented MP4 (`/stream.mp4` through Media Source Extensions, or `<video src>` without them)
/// and MJPEG (`/stream` in an `<img>`); `?path=webrtc|mp4|mjpeg` asks for one. Until a video path
/// paints its first frame the page shows `/stream` in the `<img>` over the `<video>` (the server
/// sends a new client its newest JPEG at once), then hides it and closes that connection
/// (`body.dataset.picture` says which shows: `jpeg` or `video`). WebRTC receivers ask for the
/// smallest jitter buffer (`jitterBufferTarget = 0` where the browser has it; what they read back
/// is `body.dataset.jitterBufferTarget`). It says which path it plays (`#path`,
/// `body.dataset.path`), unmutes on the Sound button, and shows the latency when
/// the picture carries the virtual camera's time code (32 blocks of 16x16 pixels in the top rows:
/// the capture time in ms since the Unix epoch modulo 2^32, most significant bit first).
enum WebPlayer {
    static let script = #"""
        const video = $("video");
        const players = { webrtc: playWebRTC, mp4: playMP4, mjpeg: playMJPEG };
        const names = { webrtc: "WebRTC (H.264)", mp4: "fragmented MP4 (H.264)", mjpeg: "MJPEG" };
        let stopPlayer = () => {};
        function showPath(path, note) {
          document.body.dataset.path = path;
          $("path").textContent = names[path] + (note ? " · " + note : "");
          video.hidden = path === "mjpeg";
          live.hidden = path !== "mjpeg" && !previewing;
          $("sound").hidden = path === "mjpeg";
        }
        // The newest JPEG at once, while a video path connects: /stream in the <img> over the
        // <video>. It goes (and so does its connection) when the video paints its first frame,
        // which then is under it already: no black between the two.
        let previewing = false;
        function startPreview() {
          if (previewing) return;
          previewing = true;
          document.body.dataset.picture = "jpeg";
          live.hidden = false;
          live.src = "stream?t=" + Date.now();
          const painted = () => {
            if (!previewing || !video.videoWidth) return;
            previewing = false;
            document.body.dataset.picture = "video";
            live.hidden = true;
            live.removeAttribute("src");
          };
          // A frame painted: requestVideoFrameCallback where the browser has it, else playing with a size.
          if (video.requestVideoFrameCallback) {
            const wait = () => video.requestVideoFrameCallback(() => { painted(); if (previewing) wait(); });
            wait();
          } else {
            video.addEventListener("playing", painted, { once: true });
          }
        }
        // Resolves true once the video's time advances (frames decode), false after `ms`.
        function advances(ms) {
          return new Promise((resolve) => {
            const start = performance.now(), t0 = video.currentTime;
            const tick = () => {
              if (video.currentTime > t0 && video.readyState >= 2) return resolve(true);
              if (performance.now() - start > ms) return resolve(false);
              setTimeout(tick, 100);
            };
            tick();
          });
        }
        // WHEP: POST the offer (application/sdp), 201 with the answer and a Location to DELETE.
        async function playWebRTC() {
          if (!window.RTCPeerConnection) return false;
          // Only when the server has the route (/state says): no peer connection for nothing.
          if (!served.some((p) => p.startsWith("/whep"))) return false;
          const pc = new RTCPeerConnection({ bundlePolicy: "max-bundle" });
          let resource = null;
          const stop = () => {
            pc.close();
            if (resource) fetch(resource, { method: "DELETE", headers: post.headers, keepalive: true }).catch(() => {});
            resource = null;
          };
          try {
            pc.addTransceiver("video", { direction: "recvonly" });
            pc.addTransceiver("audio", { direction: "recvonly" });
            // The smallest jitter buffer the browser will keep (the server's playout-delay
            // extension asks the same of the video).
            const receivers = pc.getReceivers();
            for (const receiver of receivers) if ("jitterBufferTarget" in receiver) receiver.jitterBufferTarget = 0;
            document.body.dataset.jitterBufferTarget = receivers.map((r) => String(r.jitterBufferTarget ?? "none")).join(",");
            const stream = new MediaStream();
            pc.ontrack = (e) => stream.addTrack(e.track);
            await pc.setLocalDescription(await pc.createOffer());
            // The server may not take trickled candidates: wait for them (a second at most).
            await new Promise((resolve) => {
              if (pc.iceGatheringState === "complete") return resolve();
              pc.addEventListener("icegatheringstatechange", () => { if (pc.iceGatheringState === "complete") resolve(); });
              setTimeout(resolve, 1000);
            });
            const r = await fetch("whep", {
              method: "POST", body: pc.localDescription.sdp,
              headers: { "Content-Type": "application/sdp", "X-Requested-With": "swift-capture" },
            });
            if (r.status !== 201) { stop(); return false; }
            const location = r.headers.get("Location");
            resource = location ? new URL(location, r.url).href : null;
            await pc.setRemoteDescription({ type: "answer", sdp: await r.text() });
            video.srcObject = stream;
            video.play().catch(() => {});
            if (!(await advances(patience))) { stop(); video.srcObject = null; return false; }
            stopPlayer = stop;
            addEventListener("pagehide", stop);
            // (The answer has an audio track even without a microphone: /state says whether one sends.)
            const sends = routes.whep && routes.whep.audio;
            return sends && stream.getAudioTracks().length > 0 ? "sound available" : "no sound";
          } catch (e) { stop(); video.srcObject = null; return false; }
        }
        // Fragmented MP4 through Media Source Extensions: bytes appended as they come, the play
        // position kept near the newest frame. Without MSE, the plain <video src>.
        async function playMP4() {
          if (!served.includes("/stream.mp4")) return false;
          const MS = window.ManagedMediaSource || window.MediaSource;
          const controller = new AbortController();
          if (!MS) {
            video.src = "stream.mp4";
            video.play().catch(() => {});
            if (await advances(15000)) { stopPlayer = () => video.removeAttribute("src"); return "no sound"; }
            video.removeAttribute("src");
            return false;
          }
          try {
            const r = await fetch("stream.mp4", { signal: controller.signal });
            if (!r.ok) return false;
            const reader = r.body.getReader();
            // The init segment (ftyp, moov) names the codecs: avc1.PPCCLL from its avcC, and
            // mp4a.40.2 (AAC-LC) when it has the microphone's track.
            let head = new Uint8Array(0), initEnd = 0;
            const u32 = (i) => ((head[i] << 24) | (head[i + 1] << 16) | (head[i + 2] << 8) | head[i + 3]) >>> 0;
            const tag = (i) => String.fromCharCode(head[i], head[i + 1], head[i + 2], head[i + 3]);
            while (!initEnd) {
              const { value, done } = await reader.read();
              if (done) return false;
              const joined = new Uint8Array(head.length + value.length);
              joined.set(head); joined.set(value, head.length);
              head = joined;
              for (let i = 0; i + 8 <= head.length; i += u32(i)) {
                if (u32(i) < 8) return false;
                if (tag(i + 4) === "moov") { if (i + u32(i) <= head.length) initEnd = i + u32(i); break; }
              }
              if (head.length > 1 << 20) return false;
            }
            const find = (name) => { for (let i = 4; i + 8 < initEnd; i++) if (tag(i) === name) return i; return -1; };
            const avcC = find("avcC"), sound = find("mp4a") >= 0;
            if (avcC < 0) return false;
            const codecs = ["avc1." + [head[avcC + 5], head[avcC + 6], head[avcC + 7]].map((b) => b.toString(16).padStart(2, "0")).join("")];
            if (sound) codecs.push("mp4a.40.2");
            const type = 'video/mp4; codecs="' + codecs.join(", ") + '"';
            if (!MS.isTypeSupported(type)) { controller.abort(); return false; }
            const source = new MS();
            video.disableRemotePlayback = true;
            video.src = URL.createObjectURL(source);
            await new Promise((resolve) => source.addEventListener("sourceopen", resolve, { once: true }));
            const buffer = source.addSourceBuffer(type);
            const queue = [head];
            let caughtUp = false;
            const feed = () => {
              if (buffer.updating || source.readyState !== "open") return;
              const b = buffer.buffered;
              if (b.length) {
                const end = b.end(b.length - 1), behind = end - video.currentTime;
                // Near the newest frame: far behind (or at the start, once playing), jump to it;
                // a little behind, play faster.
                if (behind > 1.5 || (!caughtUp && video.readyState >= 3 && behind > 0.2)) {
                  video.currentTime = end - 0.05;
                  caughtUp = true;
                }
                video.playbackRate = behind > 0.12 ? 1.1 : 1;
                // Keep a few seconds behind the play position, no more.
                if (video.currentTime - b.start(0) > 10) { buffer.remove(b.start(0), video.currentTime - 5); return; }
              }
              if (queue.length) buffer.appendBuffer(queue.shift());
            };
            buffer.addEventListener("updateend", feed);
            (async () => {
              try {
                for (;;) {
                  const { value, done } = await reader.read();
                  if (done) break;
                  queue.push(value);
                  feed();
                }
              } catch (e) {}
              // The server ended the stream (a new encoder: another camera or size; a stop): start
              // again, unless the page stopped it.
              if (!controller.signal.aborted) setTimeout(restart, 1000);
            })();
            feed();
            video.play().catch(() => {});
            if (!(await advances(patience))) { controller.abort(); video.removeAttribute("src"); return false; }
            stopPlayer = () => controller.abort();
            return sound ? "sound available" : "no sound";
          } catch (e) { controller.abort(); return false; }
        }
        async function playMJPEG() {
          // The preview's stream, if it runs, is the picture now.
          if (!previewing) live.src = "stream?t=" + Date.now();
          previewing = false;
          document.body.dataset.picture = "jpeg";
          return "no sound";
        }
        // The paths the server has besides /stream, and what each route says of itself (from /state).
        let served = [], routes = {};
        // How long a path may take to show its first frames: 5 s each when the page chooses (the
        // next path is better than a wait); 20 s for the path the address asks for, since no
        // other is wanted (a loaded machine starts it late).
        let patience = 5000;
        function restart() {
          stopPlayer();
          stopPlayer = () => {};
          video.removeAttribute("src");
          video.srcObject = null;
          video.load();
          choosePath();
        }
        async function choosePath() {
          startPreview();
          try {
            const state = (await (await fetch("state")).json()).result;
            served = state.paths || [];
            routes = state.routes || {};
          } catch (e) {}
          const asked = new URLSearchParams(location.search).get("path");
          const order = players[asked] ? [asked] : ["webrtc", "mp4", "mjpeg"];
          patience = players[asked] ? 20000 : 5000;
          for (const path of order) {
            // A path that failed may have ended the preview: the JPEG again while the next one connects.
            if (!video.videoWidth) startPreview();
            showPath(path, "connecting…");
            const note = await players[path]();
            if (note) { showPath(path, note); return; }
          }
          showPath("mjpeg", "no video path worked");
          playMJPEG();
        }
        $("sound").addEventListener("click", () => {
          video.muted = !video.muted;
          if (!video.muted) video.play().catch(() => {});
          $("sound").textContent = video.muted ? "Sound" : "Mute";
        });
        // The time code, when the picture has one: latency = the page's clock - the capture time.
        const codeCanvas = document.createElement("canvas");
        const latencies = [];
        function readTimeCode() {
          const source = document.body.dataset.picture === "jpeg" ? live : video;
          const w = source.videoWidth || source.naturalWidth;
          if (!w || w < 512) return;
          codeCanvas.width = 512; codeCanvas.height = 16;
          const g = codeCanvas.getContext("2d", { willReadFrequently: true });
          g.drawImage(source, 0, 0, 512, 16, 0, 0, 512, 16);
          const px = g.getImageData(0, 0, 512, 16).data;
          let code = 0;
          for (let i = 0; i < 32; i++) {
            const k = (8 * 512 + i * 16 + 8) * 4;
            const luma = (px[k] + px[k + 1] + px[k + 2]) / 3;
            if (luma > 96 && luma < 160) return;  // neither white nor black: no time code
            code = code * 2 + (luma >= 160 ? 1 : 0);
          }
          const ms = (Date.now() % 4294967296 - code + 4294967296) % 4294967296;
          if (ms > 10000) return;
          latencies.push(ms);
          if (latencies.length > 15) latencies.shift();
          const sorted = [...latencies].sort((a, b) => a - b);
          document.body.dataset.latency = String(sorted[sorted.length >> 1]);
          $("latency").textContent = "latency " + sorted[sorted.length >> 1] + " ms";
        }
        setInterval(readTimeCode, 250);
        choosePath();
        """#
}
