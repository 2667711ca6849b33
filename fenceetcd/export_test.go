package fenceetcd

// SetAfterResumeRead sets the hook that runs between Resume's read of the
// holder entry and its transaction; nil removes it.
func SetAfterResumeRead(f func(name string)) { afterResumeRead = f }
