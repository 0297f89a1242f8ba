package hostif

import (
	"github.com/rnicd/rnicd/abi"
	"github.com/rnicd/rnicd/rnic/dma"
)

type pdObj struct {
	useCount
	pd dma.PD
}

func (*pdObj) kind() objKind       { return kindPD }
func (*pdObj) release(*conn) error { return nil } // a PD is a number: nothing to free
func (*pdObj) cost() Quota         { return costPD }

func (c *conn) allocPD(object, abi.Body, []int) (abi.Body, []int, error) {
	return &abi.Handle{H: c.add(&pdObj{pd: c.s.dev.AllocPD()})}, nil, nil
}
