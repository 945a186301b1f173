// Package enginev1 holds the engine's gRPC API, generated from engine.proto
// with tools/genproto.sh. The generated files are checked in; CI regenerates
// them and fails on a difference.
package enginev1
