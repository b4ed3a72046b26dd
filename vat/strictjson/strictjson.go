// Package strictjson checks what encoding/json quietly accepts in a
// hand-written document.
//
// It checks what encoding/json quietly accepts in a document people write by
// hand (a manifest, the door table): a key twice in one object, where the
// last would win, and a key spelled in other letter case than a known one,
// which encoding/json matches to it. Either lets a reader, a person or
// another JSON parser, see a document other than the one toybox acts on.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// maxDepth bounds the nesting walked.
const maxDepth = 64

// Keys refuses data when an object names a key twice, or names a key that
// equals one of known but for letter case. Errors in the JSON itself are
// returned as the decoder says them.
func Keys(data []byte, known []string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var walk func(depth int) error
	walk = func(depth int) error {
		if depth > maxDepth {
			return errors.New("nested too deeply")
		}
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		d, ok := tok.(json.Delim)
		if !ok {
			return nil
		}
		switch d {
		case '{':
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				k, _ := kt.(string)
				if seen[k] {
					return fmt.Errorf("key %q appears twice in one object", clip(k))
				}
				seen[k] = true
				for _, want := range known {
					if k != want && strings.EqualFold(k, want) {
						return fmt.Errorf("key %q: the key is %q (keys are case-sensitive)", clip(k), want)
					}
				}
				if err := walk(depth + 1); err != nil {
					return err
				}
			}
		case '[':
			for dec.More() {
				if err := walk(depth + 1); err != nil {
					return err
				}
			}
		}
		_, err = dec.Token() // the closing delimiter
		return err
	}
	return walk(0)
}

// clip shortens a key for a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
