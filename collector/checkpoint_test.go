package collector

import "testing"

func TestCheckpointRoundTripAndHostileInput(t *testing.T) {
	for _, s := range []string{"", "lsck1|", "lsck1|x|", "lsck1|1|\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", "lsck1|1|\x01\x7f", "lsck2|1|"} {
		if _, err := parseCheckpoint(s); err == nil {
			t.Errorf("parseCheckpoint(%q) = nil error, want one", s)
		}
	}
	ck, err := parseCheckpoint("lsck1|1700000000000|")
	if err != nil || len(ck.holders) != 0 || ck.at.UnixMilli() != 1700000000000 {
		t.Errorf("empty checkpoint = %+v, %v", ck, err)
	}
}
