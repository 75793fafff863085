//go:build tools

package lcc

import (
	_ "github.com/ebitengine/purego"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/owulveryck/onnx-go"
	_ "github.com/spf13/cobra"
	_ "golang.org/x/tools/txtar"
	_ "gonum.org/v1/gonum/blas/blas64"
	_ "google.golang.org/protobuf/proto"
)
