package schema

// TargetFields are the fields of a Target as plain values. A relay reads
// a Target into them and writes them anew (Set), never the struct whole:
// a deep copy of a peer's struct carries whatever it put behind pointers
// beyond the schema's, at the cost of copying it.
type TargetFields struct {
	Scheme string
	Host   string
	Port   uint16 // 0: the scheme's default
}

// ReadTarget reads t. err is the error of getting t, so that
// ReadTarget(args.Target()) reads a call's target.
func ReadTarget(t Target, err error) (TargetFields, error) {
	if err != nil {
		return TargetFields{}, err
	}
	scheme, err := t.Scheme()
	if err != nil {
		return TargetFields{}, err
	}
	host, err := t.Host()
	if err != nil {
		return TargetFields{}, err
	}
	return TargetFields{Scheme: scheme, Host: host, Port: t.Port()}, nil
}

// Set writes f into the Target made by newTarget (a params' NewTarget).
func (f TargetFields) Set(newTarget func() (Target, error)) error {
	t, err := newTarget()
	if err != nil {
		return err
	}
	if err := t.SetScheme(f.Scheme); err != nil {
		return err
	}
	if err := t.SetHost(f.Host); err != nil {
		return err
	}
	t.SetPort(f.Port)
	return nil
}
