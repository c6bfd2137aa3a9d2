#version 450
// out[i] = gain * (bias + sum of the first TAPS weights) + i, with the
// workgroup size, TAPS, USE_GAIN and GAIN specialization constants: loaded
// with other values at run time (`weighted::Kernel::load_with`). `bias`
// sits at byte 12, after three weights: TAPS = 4 would make `w` overlap it,
// which the load refuses.
layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TAPS = 3u;
layout(constant_id = 2) const bool USE_GAIN = false;
layout(constant_id = 3) const float GAIN = 1.0;
layout(std430, binding = 0) buffer Out { float out_[]; };
layout(std430, binding = 1) readonly buffer Weights { float w[TAPS]; float bias; } weights;
void main() {
    uint i = gl_GlobalInvocationID.x;
    float s = weights.bias;
    for (uint k = 0u; k < TAPS; k++) s += weights.w[k];
    out_[i] = (USE_GAIN ? GAIN * s : s) + float(i);
}
