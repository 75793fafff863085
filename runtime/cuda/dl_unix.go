//go:build linux || darwin || freebsd || netbsd

package cuda

import "github.com/ebitengine/purego"

// dlopen opens a shared library; RTLD_NOW reports missing dependencies here rather
// than at the first call.
func dlopen(name string) (uintptr, error) {
	return purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

func dlsym(h uintptr, name string) (uintptr, error) { return purego.Dlsym(h, name) }
