// One `import Capture` gives the whole public API: the vocabulary (errors, pixel formats, times,
// audio buffers), imaging settings and the virtual devices live in lower targets.
@_exported import CaptureBackend
@_exported import CaptureImaging
@_exported import CaptureVirtual
