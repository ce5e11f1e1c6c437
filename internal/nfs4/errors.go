package nfs4

import "fmt"

func errBadUnion(what string, v uint32) error {
	return fmt.Errorf("nfs4: bad %s discriminant %d", what, v)
}

func errBadEnum(what string, v uint32) error {
	return fmt.Errorf("nfs4: bad %s value %d", what, v)
}
