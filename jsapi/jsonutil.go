package jsapi

import (
	"bytes"
	"encoding/json"
)

// jsonDecoder decodes strictly: unknown fields are errors that name them.
func jsonDecoder(b []byte) *json.Decoder {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	return d
}
