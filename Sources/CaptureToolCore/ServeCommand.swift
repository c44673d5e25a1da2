// `capture serve`: the camera over HTTP. Declared here, so that help knows it without its libraries;
// capture-full runs it (CaptureFullTool/ServeEngine.swift).

extension Command {
    package static let serve = Command(
        name: "serve", summary: "serve the camera over HTTP or HTTPS: MJPEG, WebRTC (WHEP), fragmented MP4, snapshots, the camera web app",
        usage: """
            usage: capture serve [-d|--device PATH|ID|virtual|file:MEDIA] [--preset NAME | -s|--size WxH] [-f|--format FOURCC] [-r|--fps N] [-q|--quality 1-100]
                                 [--host ADDR] [-p|--port N] [--user U [--password-file FILE]] [--allow-origin ORIGIN] [--max-clients N]
                                 [--max-viewers N] [--allow-host NAME[,NAME...]] [-a|--audio NAME|ID|virtual] [--time-code]
                                 [--metadata qr,ean13,face,...] [--tls-cert FILE --tls-key FILE] [--token-file FILE]
                                 [--rtsp [--rtsp-port N]]
                   (MJPEG at /stream and /?action=stream, WebRTC by WHEP at /whep and fragmented MP4 at /stream.mp4
                   (H.264, one encode for both), /snapshot, /state, the camera web app at /;
                   --max-viewers: WebRTC viewers at once (16); one that does not connect within 12 s or goes
                   silent for 5 s (a closed tab, a killed browser) is ended and frees its place;
                   --audio: the microphone's sound with WebRTC (Opus) and in /stream.mp4 (AAC);
                   an unplugged camera is served as offline and taken back when it returns;
                   answers to localhost names, IP literals and this machine's name, --allow-host for others;
                   --time-code: the virtual camera shows each frame's capture time, for measuring latency;
                   --metadata: the codes and faces found, as `capture metadata --types`, as server-sent events at /metadata,
                   outlined over the web app's picture;
                   --user: clients must log in (HTTP Basic) as U, with the first line of --password-file FILE, else
                   CAPTURE_PASSWORD from the environment, as the password; --password P works too, with a warning, as
                   every user of the machine can read it in ps;
                   --tls-cert, --tls-key: serve HTTPS (every route, WebRTC's included) with this PEM certificate
                   (chain) and its unencrypted PEM key; plain HTTP to the port gets no answer;
                   --token-file: token links: ?token=T (the file's first line) on any URL, e.g. an <img src>, or
                   Authorization: Bearer T, lets a client in instead of --user's password; without --user the
                   token is required; serve it over HTTPS, where the URL is not sent in clear text;
                   --rtsp: RTSP too, at rtsp://HOST:8554/camera (--rtsp-port N for another port), for NVRs, Home
                   Assistant, VLC and ffmpeg: the same H.264 encode as WebRTC's and --audio's sound as AAC (as
                   /stream.mp4's), over TCP or UDP, with --user's credentials (RTSP Basic) when given;
                   Ctrl-C or SIGTERM stops it)
            """,
        options: Options(
            valued: [
                "device", "preset", "size", "format", "fps", "quality", "host", "port", "user", "password", "password-file", "allow-origin",
                "max-clients", "max-viewers", "allow-host", "audio", "metadata", "tls-cert", "tls-key", "token-file", "rtsp-port",
            ], boolean: ["time-code", "rtsp"], exclusive: [presetOrSize, ["password", "password-file"]]),
        run: nil)
}
