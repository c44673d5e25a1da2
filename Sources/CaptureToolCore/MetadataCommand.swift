// `capture metadata`: the codes and faces the camera sees. Declared here, so that help knows it without its libraries;
// capture-full runs it (CaptureFullTool/MetadataEngine.swift).

extension Command {
    package static let metadata = Command(
        name: "metadata", summary: "print the QR codes, barcodes and faces the camera sees",
        usage: """
            usage: capture metadata [-d|--device PATH|ID|virtual|file:MEDIA] [--preset NAME | -s|--size WxH] [-f|--format FOURCC]
                                    [--types qr,ean13,face,...] [--rect X,Y,W,H] [-n|--frames N | -t|--seconds S] [--json]
                   (--types: qr, ean8, ean13, upce, code39, code93, code128, itf, pdf417, datamatrix, aztec, codabar,
                   face; all by default; --rect: the part of the frame to look in, 0...1 from the top left;
                   stops after N frames looked at, or S seconds (10 by default))
            """,
        options: Options(
            valued: ["device", "preset", "size", "format", "types", "rect", "frames", "seconds"], boolean: ["json"],
            exclusive: [presetOrSize, ["frames", "seconds"]]),
        run: nil)
}
