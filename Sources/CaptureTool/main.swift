// `capture`: list cameras, take stills, measure a stream and record a microphone with the core
// library alone, so that it starts at once; record, preview, serve, metadata and file: cameras go
// to capture-full (CaptureToolCore/FullTool.swift).
import CaptureToolCore

toolMain(CommandLine.arguments, commands: Command.all, handsOver: true)
