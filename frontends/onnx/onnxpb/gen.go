// Package onnxpb holds the Go types protoc-gen-go generates from onnx.proto, a
// hand-written subset of ONNX's onnx.proto with the upstream field numbers.
//
// Regenerate with protoc (Debian's protobuf-compiler) and protoc-gen-go v1.36.12
// (go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12) on PATH.
package onnxpb

//go:generate protoc --proto_path=. --go_out=. --go_opt=paths=source_relative onnx.proto
