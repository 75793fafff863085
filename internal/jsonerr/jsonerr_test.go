package jsonerr

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDescribe(t *testing.T) {
	type entry struct {
		Name string `json:"name"`
		GPUs int    `json:"gpus"`
	}
	for _, c := range []struct {
		data string
		want string // the whole message
		bans []string
	}{
		{"[\n {\"name\": \"x\",\n  \"gpus\": \"eight\"}]",
			`t.json: at line 3, column 18: [0].gpus: want an integer, got string`, nil},
		{"[\n {\"name\": \"x\" \"gpus\": 8}]",
			`t.json: malformed JSON at line 2, column 15: invalid character '"' after object key:value pair`, nil},
		{"[{\"name\": \"x\"", `t.json: malformed JSON: it ends before its last value does (truncated?)`, nil},
		{`{"name": 1}`, `t.json: at line 1, column 2: the top level: want an array, got object`, nil},
	} {
		var v []entry
		err := Describe("t.json", []byte(c.data), json.Unmarshal([]byte(c.data), &v))
		got := err.Error()
		// Go 1.24+ reports the field path with the index; older versions without it.
		if got != c.want && got != strings.Replace(c.want, "[0].", "", 1) {
			t.Errorf("%q:\n got %s\nwant %s", c.data, got, c.want)
		}
		for _, ban := range []string{"Go struct", "Go value", "main.", "jsonerr.", "unexpected EOF"} {
			if strings.Contains(got, ban) {
				t.Errorf("%q: %q names %q", c.data, got, ban)
			}
		}
	}
}
