package main

import (
	"testing"

	"github.com/keepstate/keepstate/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
