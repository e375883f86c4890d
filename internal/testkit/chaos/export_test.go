package chaos

// UnderLoad returns cfg with the test-only switch on: every schedule plays
// nothing and reports a violation only when played beside other worlds.
func UnderLoad(cfg Config) Config {
	cfg.underLoad = true
	return cfg
}

// OpenWorlds is how many worlds RunMany has open now.
func OpenWorlds() int64 { return openWorlds.Load() }
