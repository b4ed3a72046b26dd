package schema

// LabelFields are the fields of a Labels struct as plain values. Its fields
// are labels.Set's, in the same order, so that each side converts with a
// plain type conversion (schema.LabelFields(set), labels.Set(fields)), and a
// field added to one but not the other stops the build instead of being
// lost on the way. Empty text and a zero port mean the key is absent.
type LabelFields struct {
	Scheme  string
	Host    string
	Port    uint16
	Network string
	Vat     string
	Origin  string
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
