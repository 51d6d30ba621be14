package collector

import (
	"testing"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }
