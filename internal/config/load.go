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
// typo never silently falls back to a default. The result is validated.
func Load(path string, fs *pflag.FlagSet) (Config, error) {
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
		mapstructure.StringToTimeDurationHookFunc(),
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
