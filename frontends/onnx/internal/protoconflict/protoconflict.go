// Package protoconflict lets a test binary link both lcc's onnxpb types and
// github.com/owulveryck/onnx-go, which registers its own generated copy of
// onnx.proto under the same protobuf names ("onnx.ModelProto", ...). The protobuf
// runtime panics at init on such a conflict unless GOLANG_PROTOBUF_REGISTRATION_CONFLICT
// says otherwise, and it reads that variable when the conflict happens.
//
// Importing this package (for its side effect) sets the variable to "ignore" (no warnings either) before
// onnx-go's package initializes: Go initializes packages in import-path order
// among those ready (Go spec, "Package initialization", since Go 1.21), and
// "github.com/lcc-dev/..." sorts before "github.com/owulveryck/...". lcc's own
// registration, made first, is the one that stays in the registry; onnx-go never
// uses the registry (it unmarshals with gogo/protobuf's reflection).
//
// Only tests import it; production binaries never link onnx-go.
package protoconflict

import "os"

func init() {
	if os.Getenv("GOLANG_PROTOBUF_REGISTRATION_CONFLICT") == "" {
		os.Setenv("GOLANG_PROTOBUF_REGISTRATION_CONFLICT", "ignore")
	}
}
