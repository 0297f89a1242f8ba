package verbs

import (
	"fmt"

	"github.com/rnicd/rnicd/abi"
)

// CMCall sends a connection manager request (abi.KindCM*) on the
// context's control connection. It is package rdmacm's way in: a CM ID
// must live on the same connection as the QP it connects, since handles
// belong to one connection.
func (c *Context) CMCall(k abi.Kind, req abi.Body, fds []int, reply abi.Body) ([]int, error) {
	if k < abi.KindCMCreateChannel || k > abi.KindCMGetEvent {
		return nil, fmt.Errorf("verbs: %v is not a CM request", k)
	}
	return c.call(k, req, fds, reply)
}

// Handle is the QP's handle on its context's control connection, which
// CM requests name (rdmacm's Connect and Accept).
func (qp *QP) Handle() uint32 { return qp.h }

// SyncState takes the QP's state from the NIC, after the CM agent moved
// it (rdmacm calls it on ESTABLISHED), so that posting
// checks the state the connection left, as rxe's QP state does.
func (qp *QP) SyncState() error {
	var r abi.QPAttrReply
	if _, err := qp.pd.ctx.call(abi.KindQueryQP, &abi.Handle{H: qp.h}, nil, &r); err != nil {
		return err
	}
	qp.mu.Lock()
	qp.state = r.Attr.State
	qp.mu.Unlock()
	return nil
}
