// python -m tools.eso_template runs this (docs/secrets.md, a key per caller).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"text/template"
)

// Renders each template of tpl.json the way External Secrets' engine v2 does (text/template, missingkey=error,
// data as map[string]string) for each case of cases.json.
func main() {
	var tpls map[string]string
	raw, _ := os.ReadFile(os.Args[1])
	json.Unmarshal(raw, &tpls)
	var cases map[string]map[string]string
	raw, _ = os.ReadFile(os.Args[2])
	json.Unmarshal(raw, &cases)
	out := map[string]map[string]string{}
	for name, data := range cases {
		out[name] = map[string]string{}
		for k, v := range tpls {
			t, err := template.New(k).Option("missingkey=error").Parse(v)
			if err != nil { fmt.Println("parse", err); os.Exit(1) }
			var buf bytes.Buffer
			if err := t.Execute(&buf, data); err != nil { out[name][k] = "ERROR: " + err.Error(); continue }
			out[name][k] = buf.String()
		}
	}
	enc, _ := json.MarshalIndent(out, "", " ")
	fmt.Println(string(enc))
}
