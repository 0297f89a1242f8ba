package qpmgr

import "testing"

// A table with a range hands out its QPNs in order, wraps, skips those in
// use, and says so when all are.
func TestTableRange(t *testing.T) {
	tab := NewTableRange(5<<16, 5<<16|2)
	for _, want := range []uint32{5 << 16, 5<<16 | 1, 5<<16 | 2} {
		if got, err := tab.Alloc(); got != want || err != nil {
			t.Fatalf("Alloc = %#x, %v; want %#x", got, err, want)
		}
	}
	if got, err := tab.Alloc(); err == nil {
		t.Fatalf("Alloc with every QPN in use = %#x", got)
	}
	tab.Remove(5<<16 | 1)
	if got, err := tab.Alloc(); got != 5<<16|1 || err != nil {
		t.Fatalf("Alloc after Remove = %#x, %v; want %#x", got, err, 5<<16|1)
	}
	if got, _ := NewTableRange(0, 0xffff).Alloc(); got != FirstQPN {
		t.Fatalf("a range from 0 starts at %#x, want FirstQPN", got)
	}
}

// Lookup finds a QP from Insert to Remove, and nothing for a QPN only
// reserved by Alloc or freed, while other goroutines look up beside it.
func TestTableLookup(t *testing.T) {
	tab := NewTable()
	qpn, err := tab.Alloc()
	if err != nil {
		t.Fatal(err)
	}
	if qp := tab.Lookup(qpn); qp != nil {
		t.Fatalf("a reserved QPN %#x looks up %p", qpn, qp)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 10000 {
			if qp := tab.Lookup(qpn); qp != nil && qp.QPN != qpn {
				t.Errorf("QPN %#x looks up QP %#x", qpn, qp.QPN)
				return
			}
		}
	}()
	qp := &QP{QPN: qpn}
	tab.Insert(qp)
	if got := tab.Lookup(qpn); got != qp {
		t.Fatalf("inserted QP %#x looks up %p, want %p", qpn, got, qp)
	}
	if got := tab.Lookup(qpn + 1); got != nil {
		t.Fatalf("QPN %#x, never allocated, looks up %p", qpn+1, got)
	}
	if all := tab.All(); len(all) != 1 || all[0] != qp {
		t.Fatalf("All = %v, want the one QP", all)
	}
	tab.Remove(qpn)
	<-done
	if got := tab.Lookup(qpn); got != nil {
		t.Fatalf("removed QP %#x looks up %p", qpn, got)
	}
}

// BenchmarkTableLookup looks up QPs from every P at once, as several
// engines do for every packet they receive.
func BenchmarkTableLookup(b *testing.B) {
	tab := NewTable()
	var qpns []uint32
	for range 64 {
		qpn, _ := tab.Alloc()
		tab.Insert(&QP{QPN: qpn})
		qpns = append(qpns, qpn)
	}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if tab.Lookup(qpns[i%len(qpns)]) == nil {
				b.Fatal("lost a QP")
			}
			i++
		}
	})
}
