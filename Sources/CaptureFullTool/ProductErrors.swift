// The words of the products' errors, for the tool's one error line (CaptureToolCore/Errors.swift
// has the core's).
import CapturePreview
import CaptureRTSP
import CaptureRecording
import CaptureServer

/// The message of an error only the products capture-full links throw; nil for any other.
func productErrorMessage(_ error: any Error) -> String? {
    switch error {
    case let e as CaptureServerError: e.message
    case let e as PreviewError: e.message
    case let e as RecordingError: e.message
    case let e as RTSPServerError: e.message
    default: nil
    }
}
