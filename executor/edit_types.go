package executor

// Edit is one change to a file, after the edit engine of the seed
// (002_ba446fb351f1844c.txt). The mode is chosen by which fields are set,
// with precedence range > insert > delete > replace:
//
//	replace:              Old, New (All for every occurrence)
//	delete:               Old, Delete
//	insert before/after:  Old, Insert ("before"|"after"), Content
//	insert start/end:     Insert ("start"|"end"), Content
//	range:                From, To, Content (inclusive of both anchors)
type Edit struct {
	Old     string  `json:"old,omitempty"`
	New     *string `json:"new,omitempty"`
	All     bool    `json:"all,omitempty"`
	Delete  bool    `json:"delete,omitempty"`
	Insert  string  `json:"insert,omitempty"`
	Content *string `json:"content,omitempty"`
	From    string  `json:"from,omitempty"`
	To      string  `json:"to,omitempty"`
}

// EditResult is what an edit pass did.
type EditResult struct {
	// Content is the new file content.
	Content string `json:"content"`
	// Applied counts the edits applied.
	Applied int `json:"applied"`
	// Changes lists the changed regions, by line of the original (1-based).
	Changes []Change `json:"changes"`
}

// Change is one changed region.
type Change struct {
	Line    int `json:"line"`
	Removed int `json:"removed"`
	Added   int `json:"added"`
}
