package schema

// LabelFields are the fields of a Labels struct as plain values, so that the
// switchboard and the supervisor (which meet only here) convert to and from
// their label sets in one place each way. Empty text and a zero port mean
// the key is absent.
type LabelFields struct {
	Scheme, Host, Network, Vat, Origin string
	Port                               uint16
}

// SetFields writes f into l.
func (l Labels) SetFields(f LabelFields) error {
	for _, kv := range []struct {
		v   string
		set func(string) error
	}{{f.Scheme, l.SetScheme}, {f.Host, l.SetHost}, {f.Network, l.SetNetwork}, {f.Vat, l.SetVat}, {f.Origin, l.SetOrigin}} {
		if kv.v == "" {
			continue
		}
		if err := kv.set(kv.v); err != nil {
			return err
		}
	}
	l.SetPort(f.Port)
	return nil
}

// Fields reads l.
func (l Labels) Fields() (LabelFields, error) {
	var f LabelFields
	var err error
	for _, kv := range []struct {
		dst *string
		get func() (string, error)
	}{{&f.Scheme, l.Scheme}, {&f.Host, l.Host}, {&f.Network, l.Network}, {&f.Vat, l.Vat}, {&f.Origin, l.Origin}} {
		if *kv.dst, err = kv.get(); err != nil {
			return f, err
		}
	}
	f.Port = l.Port()
	return f, nil
}
