// Included by the shaders through build.rs's include_dir.
uint twice(uint i) { return 2u * i; }
