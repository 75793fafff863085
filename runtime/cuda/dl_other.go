//go:build !(linux || darwin || freebsd || netbsd)

package cuda

import (
	"errors"
	"runtime"
)

var errNoDlopen = errors.New("dynamic loading is not supported on " + runtime.GOOS)

func dlopen(string) (uintptr, error) { return 0, errNoDlopen }

func dlsym(uintptr, string) (uintptr, error) { return 0, errNoDlopen }
