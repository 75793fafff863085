package onnx

import (
	"fmt"
	"math"

	"github.com/lcc-dev/lcc/frontends/onnx/onnxpb"
	"github.com/lcc-dev/lcc/tensor"
)

// dtypes maps ONNX TensorProto.DataType values to lcc's dtypes.
var dtypes = map[int32]tensor.DType{
	int32(onnxpb.TensorProto_FLOAT):    tensor.F32,
	int32(onnxpb.TensorProto_FLOAT16):  tensor.F16,
	int32(onnxpb.TensorProto_BFLOAT16): tensor.BF16,
	int32(onnxpb.TensorProto_DOUBLE):   tensor.F64,
	int32(onnxpb.TensorProto_INT64):    tensor.I64,
	int32(onnxpb.TensorProto_INT32):    tensor.I32,
	int32(onnxpb.TensorProto_INT8):     tensor.I8,
	int32(onnxpb.TensorProto_UINT8):    tensor.U8,
	int32(onnxpb.TensorProto_BOOL):     tensor.Bool,
}

// DType converts an ONNX TensorProto.DataType value to lcc's dtype. It reports
// false for the types lcc does not support.
func DType(onnxType int32) (tensor.DType, bool) {
	dt, ok := dtypes[onnxType]
	return dt, ok
}

// dtypeName names an ONNX data type for messages: "STRING (8)".
func dtypeName(t int32) string {
	return fmt.Sprintf("%v (%d)", onnxpb.TensorProto_DataType(t), t)
}

// decodeDType is DType with an error for unsupported types.
func decodeDType(t int32) (tensor.DType, error) {
	dt, ok := dtypes[t]
	if !ok {
		return tensor.Invalid, fmt.Errorf("%w: dtype %s (lcc supports FLOAT, FLOAT16, BFLOAT16, "+
			"DOUBLE, INT64, INT32, INT8, UINT8, BOOL)", ErrUnsupported, dtypeName(t))
	}
	return dt, nil
}

// decodeTensor decodes a TensorProto; what names it for messages (`initializer
// "w"`, `attribute "value"`). Sizes are checked against the bytes present before
// any element buffer is allocated.
func (d *decoder) decodeTensor(tp *onnxpb.TensorProto, what string) (*tensor.Tensor, error) {
	t, err := d.decodeTensorData(tp)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return t, nil
}

func (d *decoder) decodeTensorData(tp *onnxpb.TensorProto) (*tensor.Tensor, error) {
	dt, err := decodeDType(tp.GetDataType())
	if err != nil {
		return nil, err
	}
	if tp.Segment != nil {
		return nil, fmt.Errorf("%w: segmented tensor (TensorProto.segment)", ErrUnsupported)
	}
	shape := tp.GetDims()
	n, err := tensor.Numel(shape)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	size := n * int64(dt.Size()) // cannot overflow: n ≤ tensor.MaxElements, Size ≤ 8
	typed := typedCounts(tp)
	if tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		if tp.RawData != nil || typed.total > 0 {
			return nil, fmt.Errorf("%w: external tensor also carries inline data", ErrMalformed)
		}
		return d.readExternal(tp, dt, shape, size)
	}
	if len(tp.GetExternalData()) > 0 {
		return nil, fmt.Errorf("%w: external_data entries without data_location EXTERNAL", ErrMalformed)
	}
	if tp.RawData != nil {
		if typed.total > 0 {
			return nil, fmt.Errorf("%w: both raw_data and typed data fields are set", ErrMalformed)
		}
		if int64(len(tp.RawData)) != size {
			return nil, fmt.Errorf("%w: raw_data holds %d bytes, but %v%s needs %d",
				ErrMalformed, len(tp.RawData), dt, tensor.ShapeString(shape), size)
		}
		return tensor.Decode(dt, shape, tp.RawData)
	}
	return decodeTyped(tp, dt, shape, n, typed)
}

// counts of the typed data fields of a TensorProto.
type fieldCounts struct {
	float, int32, int64, double, uint64, str, total int
}

func typedCounts(tp *onnxpb.TensorProto) fieldCounts {
	c := fieldCounts{
		float:  len(tp.GetFloatData()),
		int32:  len(tp.GetInt32Data()),
		int64:  len(tp.GetInt64Data()),
		double: len(tp.GetDoubleData()),
		uint64: len(tp.GetUint64Data()),
		str:    len(tp.GetStringData()),
	}
	c.total = c.float + c.int32 + c.int64 + c.double + c.uint64 + c.str
	return c
}

// decodeTyped reads the elements from the typed field ONNX assigns to dt:
// float_data for f32, double_data for f64, int64_data for i64, and int32_data for
// i32, i8, u8, bool and the bit patterns of f16 and bf16.
func decodeTyped(tp *onnxpb.TensorProto, dt tensor.DType, shape []int64, n int64,
	c fieldCounts) (*tensor.Tensor, error) {
	field, have := "int32_data", c.int32
	switch dt {
	case tensor.F32:
		field, have = "float_data", c.float
	case tensor.F64:
		field, have = "double_data", c.double
	case tensor.I64:
		field, have = "int64_data", c.int64
	}
	if have != c.total {
		return nil, fmt.Errorf("%w: %v data must be in %s, found other typed fields set",
			ErrMalformed, dt, field)
	}
	if int64(have) != n {
		if have == 0 {
			return nil, fmt.Errorf("%w: %v%s has no data (no raw_data, %s empty)",
				ErrMalformed, dt, tensor.ShapeString(shape), field)
		}
		return nil, fmt.Errorf("%w: %s holds %d values, but %v%s needs %d",
			ErrMalformed, field, have, dt, tensor.ShapeString(shape), n)
	}
	// n equals the length of a slice already in memory, so allocating is safe.
	t := tensor.New(dt, shape...)
	switch dt {
	case tensor.F32:
		for i, v := range tp.GetFloatData() {
			t.F[i] = float64(v)
		}
	case tensor.F64:
		copy(t.F, tp.GetDoubleData())
	case tensor.I64:
		copy(t.I, tp.GetInt64Data())
	case tensor.F16:
		for i, v := range tp.GetInt32Data() {
			t.F[i] = float64(tensor.F16ToFloat32(uint16(v)))
		}
	case tensor.BF16:
		for i, v := range tp.GetInt32Data() {
			t.F[i] = float64(tensor.BF16ToFloat32(uint16(v)))
		}
	case tensor.I32:
		for i, v := range tp.GetInt32Data() {
			t.I[i] = int64(v)
		}
	case tensor.I8:
		for i, v := range tp.GetInt32Data() {
			if v < math.MinInt8 || v > math.MaxInt8 {
				return nil, fmt.Errorf("%w: int8 value %d out of range at element %d", ErrMalformed, v, i)
			}
			t.I[i] = int64(v)
		}
	case tensor.U8:
		for i, v := range tp.GetInt32Data() {
			if v < 0 || v > math.MaxUint8 {
				return nil, fmt.Errorf("%w: uint8 value %d out of range at element %d", ErrMalformed, v, i)
			}
			t.I[i] = int64(v)
		}
	case tensor.Bool:
		for i, v := range tp.GetInt32Data() {
			if v != 0 {
				t.I[i] = 1
			}
		}
	}
	return t, nil
}
