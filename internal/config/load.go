package config

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// EnvPrefix is the prefix of environment overrides: rule.threshold is
// PROCESSOR_RULE_THRESHOLD.
const EnvPrefix = "PROCESSOR"

// Load builds the configuration from, in increasing precedence: the
// defaults, the YAML file at path (optional; "" for none), the environment
// (PROCESSOR_*) and the flags in fs that were set (flag names are the keys,
// for example --rule.threshold). Unknown keys in the file are errors, so a
// typo never silently falls back to a default. The result is validated,
// its rules (Rules) included.
func Load(path string, fs *pflag.FlagSet) (Config, error) {
	c, err := LoadSettings(path, fs)
	if err != nil {
		return Config{}, err
	}
	// The rules too: a missing or invalid rules_file is a configuration
	// error like any other, found before anything connects to Kafka.
	if _, err := c.Rules(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// LoadSettings is Load without loading the rules: for `processor rules
// check`, which reports on the rules itself.
func LoadSettings(path string, fs *pflag.FlagSet) (Config, error) {
	v := viper.New()
	def := Default()
	for key, val := range flatten(reflect.ValueOf(def), "") {
		v.SetDefault(key, val)
	}
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	v.AutomaticEnv()
	if path != "" {
		v.SetConfigFile(path)
		v.SetConfigType("yaml")
		if err := v.ReadInConfig(); err != nil {
			return Config{}, fmt.Errorf("config: read %s: %w", path, err)
		}
	}
	if fs != nil {
		var bindErr error
		fs.VisitAll(func(f *pflag.Flag) {
			if _, known := flatten(reflect.ValueOf(def), "")[f.Name]; known && bindErr == nil {
				bindErr = v.BindPFlag(f.Name, f)
			}
		})
		if bindErr != nil {
			return Config{}, fmt.Errorf("config: bind flags: %w", bindErr)
		}
	}
	var c Config
	err := v.UnmarshalExact(&c, viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(
		durationHook,
		mapstructure.StringToSliceHookFunc(","),
	)))
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// durationHook decodes a duration setting: a string such as "30s" or
// "1h30m" (time.ParseDuration). A plain number other than 0 is refused
// rather than read as nanoseconds, and a bad string is named with the
// format that is wanted; mapstructure prefixes the key.
func durationHook(_, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[time.Duration]() {
		return data, nil
	}
	const want = "want a number with a unit (ns, us, ms, s, m, h), such as 100ms, 30s, 5m or 1h30m"
	switch x := data.(type) {
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(x))
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration: %s", x, want)
		}
		return d, nil
	case time.Duration:
		return x, nil
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		if reflect.ValueOf(x).IsZero() {
			return time.Duration(0), nil
		}
		return nil, fmt.Errorf("%v is not a duration: %s", x, want)
	}
	return data, nil
}

// Keys lists every configuration key with its default, for documentation
// and `processor config`.
func Keys() map[string]any {
	return flatten(reflect.ValueOf(Default()), "")
}

// flatten turns a config struct into dotted keys using the mapstructure tags.
func flatten(v reflect.Value, prefix string) map[string]any {
	out := map[string]any{}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("mapstructure")
		if tag == "" {
			continue
		}
		key := tag
		if prefix != "" {
			key = prefix + "." + tag
		}
		fv := v.Field(i)
		if fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeOf(time.Duration(0)) {
			for k, val := range flatten(fv, key) {
				out[k] = val
			}
			continue
		}
		out[key] = fv.Interface()
	}
	return out
}
