package safetensors

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// TestLargeHeaderMemory: a header of many megabytes, one long shape or a flood of
// empty entries, is refused while decoding allocates a few times its size in all, not the
// thirty times a copy of every entry and a whole decoded list used to (a 59 MB
// header took about 800 MB of RSS).
func TestLargeHeaderMemory(t *testing.T) {
	const size = 8 << 20
	var many strings.Builder
	many.WriteString("{")
	for i := 0; many.Len() < size; i++ {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(ent(fmt.Sprint("t", i), "U8", "[0]", "[0,0]"))
	}
	many.WriteString("}")
	cases := []struct{ name, header, want string }{
		{"long shape", `{"a":{"dtype":"U8","shape":[` + strings.Repeat("1,", size/2) + `1],"data_offsets":[0,0]}}`,
			`tensor "a": bad header entry: rank exceeds the limit of 64`},
		{"many entries", many.String(), "more than 131072 tensors"},
		{"long offsets", `{"a":{"dtype":"U8","shape":[0],"data_offsets":[` + strings.Repeat("0,", size/2) + `0]}}`,
			"must be [begin, end]"},
	}
	for _, c := range cases {
		data := file(c.header, nil)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := Decode(data)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
		if len(fmt.Sprint(err)) > 2048 {
			t.Errorf("%s: a %d-byte error message", c.name, len(err.Error()))
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*uint64(len(data)) {
			t.Errorf("%s: decoding a %d-byte header allocated %d bytes", c.name, len(data), alloc)
		}
	}
}

// TestHeaderSyntax: the scanner reads what encoding/json reads (escapes, nulls,
// whitespace) and refuses truncated or malformed JSON with an error, never a panic.
func TestHeaderSyntax(t *testing.T) {
	good := []string{
		`{"a\u0062":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`,
		"{ \"ab\" : { \"dtype\" : \"U8\" ,\n\"shape\":[ 1 ],\t\"data_offsets\":[0 , 1]} } ",
		`{"__metadata__":null,"ab":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`,
		`{"__metadata__":{"k":"v\"w"},"ab":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`,
	}
	for _, h := range good {
		f, err := Decode(file(h, []byte{7}))
		if err != nil || f.Tensors["ab"] == nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	whole := `{"__metadata__":{"k":"v"},"ab":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`
	for i := 1; i < len(whole); i++ {
		if _, err := Decode(file(whole[:i], []byte{7})); err == nil {
			t.Errorf("the header cut at %d bytes decodes", i)
		}
	}
	for _, h := range []string{`{"a":{"dtype":"U8","shape":[01],"data_offsets":[0,1]}}`,
		`{"a":{"dtype":"U8","shape":[+1],"data_offsets":[0,1]}}`,
		`{"a":{"dtype":"U8","shape":[1,],"data_offsets":[0,1]}}`,
		`{"a":{"dtype":"U8","shape":[1]"data_offsets":[0,1]}}`,
		`{"a" {"dtype":"U8"}}`, `{"a\x01":null}`} {
		if _, err := Decode(file(h, []byte{7})); err == nil {
			t.Errorf("%s decodes", h)
		}
	}
}
