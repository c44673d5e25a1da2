/// The web app's metadata overlay: when the server has `/metadata` (CaptureVisionServer's
/// `serveMetadata`), the page reads its server-sent events and outlines each object over the live
/// picture, whichever path plays (WebRTC, MP4, MJPEG): codes in green (#00ff00) with their text
/// beside the box, faces in yellow (#ffff00) with their ID, as `capture preview --metadata` draws
/// them. The objects' normalized rectangles are mapped through the element's `object-fit`
/// (contain = resizeAspect, cover = resizeAspectFill, fill = resize) and mirrored when the page
/// mirrors the picture. `body.dataset.metadataEvents` counts the events read.
enum WebOverlay {
    static let script = #"""
        const boxes = $("boxes");
        const boxColors = { code: "#00ff00", face: "#ffff00" };
        let shownObjects = [], shownAt = 0, metadataEvents = 0;
        // Where the picture's frame lies in its element (CSS pixels), as object-fit places it
        // (centred, object-position's default); null before the first frame.
        function pictureRect(el) {
          const iw = el.videoWidth || el.naturalWidth, ih = el.videoHeight || el.naturalHeight;
          const ew = el.clientWidth, eh = el.clientHeight;
          if (!iw || !ih || !ew || !eh) return null;
          const fit = getComputedStyle(el).objectFit;
          if (fit === "fill") return { x: 0, y: 0, w: ew, h: eh };
          const s = fit === "cover" ? Math.max(ew / iw, eh / ih) : Math.min(ew / iw, eh / ih);
          return { x: (ew - iw * s) / 2, y: (eh - ih * s) / 2, w: iw * s, h: ih * s };
        }
        function drawBoxes() {
          const dpr = window.devicePixelRatio || 1;
          const w = boxes.clientWidth, h = boxes.clientHeight;
          if (boxes.width !== Math.round(w * dpr) || boxes.height !== Math.round(h * dpr)) {
            boxes.width = Math.round(w * dpr);
            boxes.height = Math.round(h * dpr);
          }
          const g = boxes.getContext("2d");
          g.setTransform(dpr, 0, 0, dpr, 0, 0);
          g.clearRect(0, 0, w, h);
          const el = document.body.dataset.picture === "jpeg" ? live : video;
          const r = pictureRect(el);
          if (!r || !shownObjects.length) return;
          // The picture element fills the view as the canvas does; mirrored, it is flipped about
          // its centre (the text is not).
          const mirrored = $("view").classList.contains("mirrored");
          g.lineWidth = 3;
          g.font = "bold 14px system-ui, sans-serif";
          g.textBaseline = "top";
          for (const o of shownObjects) {
            const [bx, by, bw, bh] = o.bounds;
            let x = r.x + bx * r.w;
            const y = r.y + by * r.h, bwPx = bw * r.w, bhPx = bh * r.h;
            if (mirrored) x = w - x - bwPx;
            const color = o.type === "face" ? boxColors.face : boxColors.code;
            g.strokeStyle = color;
            g.strokeRect(x, y, bwPx, bhPx);
            const label = o.type === "face" ? "face " + o.face_id : (o.text === null ? o.type + " (bytes)" : o.text);
            const text = label.length > 60 ? label.slice(0, 57) + "…" : label;
            const tw = g.measureText(text).width + 8;
            // Beside the box: above it, or below when there is no room above.
            const ty = y >= 22 ? y - 22 : y + bhPx + 4;
            g.fillStyle = "rgba(0, 0, 0, 0.7)";
            g.fillRect(x - 1.5, ty, tw, 20);
            g.fillStyle = color;
            g.fillText(text, x + 2.5, ty + 3);
          }
        }
        function readMetadata() {
          const events = new EventSource("metadata");
          events.onmessage = (e) => {
            try { shownObjects = JSON.parse(e.data).objects || []; } catch (err) { return; }
            shownAt = performance.now();
            metadataEvents += 1;
            document.body.dataset.metadataEvents = String(metadataEvents);
            drawBoxes();
          };
          events.onerror = () => {
            shownObjects = [];
            drawBoxes();
            // Refused (503: a full house) or gone: EventSource gives up; try again later.
            if (events.readyState === EventSource.CLOSED) setTimeout(readMetadata, 5000);
          };
        }
        // Objects not confirmed for 3 s (detection stopped, the camera went) are taken down.
        setInterval(() => {
          if (shownObjects.length && performance.now() - shownAt > 3000) shownObjects = [];
          drawBoxes();
        }, 500);
        addEventListener("resize", drawBoxes);
        $("gravity").addEventListener("change", drawBoxes);
        $("mirror").addEventListener("change", drawBoxes);
        (async () => {
          try {
            const paths = (await (await fetch("state")).json()).result.paths || [];
            if (paths.includes("/metadata")) readMetadata();
          } catch (e) {}
        })();
        """#
}
