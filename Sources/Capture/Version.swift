// The version of swift-capture this source is, in one place: `capture --version` prints it and
// the server's `/state` reports it. The release commit sets it to the tag (README: Releasing).

/// The release this source is (`X.Y.Z`, as its tag), or leads to between releases (`X.Y.Z-dev`).
package let captureVersion = "0.2.0-dev"
