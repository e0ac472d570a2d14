package executor

import "errors"

// ApplyEdits applies edits to source. Not implemented yet: the edit engine
// lands in the next commit.
func ApplyEdits(source string, edits []Edit) (EditResult, error) {
	if len(edits) == 0 {
		return EditResult{Content: source}, nil
	}
	return EditResult{}, errors.New("edit engine not implemented yet")
}
