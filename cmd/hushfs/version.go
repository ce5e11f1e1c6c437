package main

import (
	"errors"
	"fmt"

	"hushfs/internal/version"
)

// runVersion prints the build: the module version and the commit it was
// built from.
func runVersion(args []string) error {
	if len(args) > 0 {
		return errors.New("usage: hushfs version (or hushfs --version)")
	}
	fmt.Println(version.String())
	return nil
}
