package memstore_test

import (
	"testing"

	"github.com/keepstate/keepstate/engine"
	"github.com/keepstate/keepstate/engine/memstore"
	"github.com/keepstate/keepstate/engine/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) engine.Store { return memstore.New() })
}
