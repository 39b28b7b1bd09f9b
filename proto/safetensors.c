/* placeholder: proto/safetensors.c */
