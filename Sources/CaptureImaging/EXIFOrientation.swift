/// The EXIF/TIFF `Orientation` tag (0x0112): how a viewer must turn the stored pixels to show
/// them upright. Raw values are the tag's 1...8, named as `CGImagePropertyOrientation` names them.
public enum EXIFOrientation: UInt16, Sendable, Hashable, CaseIterable {
    /// 1: stored upright.
    case up = 1
    /// 2: mirrored left to right.
    case upMirrored = 2
    /// 3: turned 180°.
    case down = 3
    /// 4: mirrored top to bottom.
    case downMirrored = 4
    /// 5: transposed: shown turned 90° clockwise, then mirrored left to right.
    case leftMirrored = 5
    /// 6: shown turned 90° clockwise (a portrait photo from a landscape sensor).
    case right = 6
    /// 7: transverse: shown turned 90° counter-clockwise, then mirrored left to right.
    case rightMirrored = 7
    /// 8: shown turned 90° counter-clockwise.
    case left = 8

    /// The tag a still needs so that it displays as the connection's orientation and mirroring
    /// say. `mirrored` flips the displayed picture left to right.
    ///
    /// landscapeRight → 1 (2 mirrored), landscapeLeft → 3 (4), portrait → 6 (5),
    /// portraitUpsideDown → 8 (7).
    public init(videoOrientation: VideoOrientation, mirrored: Bool) {
        switch (videoOrientation, mirrored) {
        case (.landscapeRight, false): self = .up
        case (.landscapeRight, true): self = .upMirrored
        case (.landscapeLeft, false): self = .down
        case (.landscapeLeft, true): self = .downMirrored
        case (.portrait, false): self = .right
        case (.portrait, true): self = .leftMirrored
        case (.portraitUpsideDown, false): self = .left
        case (.portraitUpsideDown, true): self = .rightMirrored
        }
    }
}
