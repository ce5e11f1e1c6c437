package nfs3

import "fmt"

func errBadUnion(what string, v uint32) error {
	return fmt.Errorf("nfs3: bad %s discriminant %d", what, v)
}
