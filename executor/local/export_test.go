package local

// DataDirForTest exposes the data directory to the attack tests.
func (e *Executor) DataDirForTest() string { return e.o.DataDir }
